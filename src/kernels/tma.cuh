// Bulk tensor copies (TMA, sm_90) into shared memory, as the kernels that stage tiles with them
// use them (tma_gemm.cuh's copier, the hd-256 attention's K and V): the tensor map of a
// row-major bf16 matrix read in 64-column boxes, 128-byte swizzled (the layout of wgmma.cuh), and
// the copy of one box completing on an mbarrier (mbarrier.cuh's bar_expect announces its bytes).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace flide::kernels::detail {

// Box (c0 = column, c1 = row) of `map` into shared memory at dst, completing on bar. Rows outside
// the tensor (negative ones too) arrive as zeros.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// The driver's cuTensorMapEncodeTiled, found through the runtime (no link against libcuda), once
// per process (a static's initialisation is thread-safe: backends of several devices may ask at
// once).
inline cudaError_t encoder(EncodeTiled& fn) {
  struct Found {
    cudaError_t err;
    EncodeTiled fn;
  };
  static const Found found = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult result{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                             cudaEnableDefault, &result);
    if (err != cudaSuccess) return Found{err, nullptr};
    if (result != cudaDriverEntryPointSuccess || !p) return Found{cudaErrorNotSupported, nullptr};
    return Found{cudaSuccess, reinterpret_cast<EncodeTiled>(p)};
  }();
  fn = found.fn;
  return found.err;
}

// A row-major [rows, cols] matrix of `type` elements of `bytes` each, read in boxes of
// box_rows rows of 128 bytes, 128-byte swizzled.
inline cudaError_t tile_map_128b(CUtensorMap& map, CUtensorMapDataType type, int bytes,
                                 const void* p, int64_t rows, int64_t cols, uint32_t box_rows) {
  EncodeTiled encode = nullptr;
  if (const cudaError_t err = encoder(encode); err != cudaSuccess) return err;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * cuuint64_t(bytes)};
  const cuuint32_t box[2] = {cuuint32_t(128 / bytes), box_rows};
  const cuuint32_t steps[2] = {1, 1};
  std::memset(&map, 0, sizeof map);
  const CUresult r = encode(&map, type, 2, const_cast<void*>(p), dims, strides, box, steps,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// A row-major [rows, cols] bf16 matrix read in [box_rows][64] boxes, 128-byte swizzled.
inline cudaError_t tile_map(CUtensorMap& map, const __nv_bfloat16* p, int64_t rows, int64_t cols,
                            uint32_t box_rows = 128) {
  return tile_map_128b(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, rows, cols, box_rows);
}

// A row-major [rows, cols] matrix of bytes (FP8 e4m3) read in [128][128] boxes, 128-byte
// swizzled: the same 128-byte rows, and so the same shared-memory layout, as tile_map's bf16 boxes.
inline cudaError_t tile_map_fp8(CUtensorMap& map, const uint8_t* p, int64_t rows, int64_t cols) {
  return tile_map_128b(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p, rows, cols, 128);
}

}  // namespace flide::kernels::detail
