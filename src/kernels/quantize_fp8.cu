// Rows of bf16 to FP8 e4m3 with a float scale a row (dense.h quantize_rows_fp8): the operands of
// the FP8 products (tma_gemm.cuh), activations each round and weights once at load. A row's scale
// is its largest magnitude over e4m3's largest finite value (448), so the row's largest element
// lands on 448 and the rest round to nearest-even e4m3 (saturating; a zero row keeps scale 1). A
// row's bytes and scale depend only on the row.
#include <cuda_fp8.h>

#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"

namespace flide::kernels {
namespace {

constexpr float kE4m3Max = 448.f;
constexpr int kWarps = 8;

// A warp a row, 8 elements (one 16-byte load, one 8-byte store) a lane at a time; the row is read
// twice, the second time from L1/L2.
__global__ void __launch_bounds__(32 * kWarps)
    quantize_rows_kernel(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  for (int64_t r = int64_t(blockIdx.x) * kWarps + int(threadIdx.x) / 32; r < rows; r += warps) {
    const bf16* row = x + r * cols;
    float amax = 0.f;
    for (int64_t c = 8 * int64_t(lane); c < cols; c += 256) {
      float f[8];
      detail::load8(row + c, cols - c, true, f);
#pragma unroll
      for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(f[k]));
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = amax > 0.f ? amax / kE4m3Max : 1.f;
    const float inv = 1.f / s;
    if (lane == 0) scale[r] = s;
    uint8_t* out = q + r * cols;
    for (int64_t c = 8 * int64_t(lane); c < cols; c += 256) {
      float f[8];
      detail::load8(row + c, cols - c, true, f);
      uint16_t pairs[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        pairs[k] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * k] * inv, f[2 * k + 1] * inv),
                                            __NV_SATFINITE, __NV_E4M3);
      uint2 packed;
      packed.x = uint32_t(pairs[0]) | uint32_t(pairs[1]) << 16;
      packed.y = uint32_t(pairs[2]) | uint32_t(pairs[3]) << 16;
      *reinterpret_cast<uint2*>(out + c) = packed;
    }
  }
}

}  // namespace

cudaError_t quantize_rows_fp8(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale,
                              cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  // Whole 16-byte loads and 8-byte stores: every row starts aligned.
  if (cols <= 0 || cols % 8 != 0 || !detail::aligned16(x) || !detail::aligned(q, 8) || !scale)
    return cudaErrorInvalidValue;
  quantize_rows_kernel<<<detail::blocks_for(rows, kWarps), 32 * kWarps, 0, stream>>>(x, rows, cols,
                                                                                     q, scale);
  return cudaGetLastError();
}

}  // namespace flide::kernels
