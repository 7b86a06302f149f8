// bf16 to FP8 e4m3, quantized as fp8_rows.cuh says: with a float scale a row (dense.h
// quantize_rows_fp8: the operands of the FP8 products of tma_gemm.cuh, activations each round and
// weights once at load; a row's bytes and scale depend only on the row), or a 128 x 128 tile
// (quantize_tiles_fp8: the weights of the FP8 output projections, once at load).
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"
#include "kernels/fp8_rows.cuh"

namespace flide::kernels {
namespace {

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
    const float s = detail::fp8_row_scale(amax);
    const float inv = 1.f / s;
    if (lane == 0) scale[r] = s;
    for (int64_t c = 8 * int64_t(lane); c < cols; c += 256) {
      float f[8];
      detail::load8(row + c, cols - c, true, f);
      detail::store_e4m3x8(q + r * cols + c, f, inv);
    }
  }
}

// A block a tile: each thread 64 elements of one of its rows (threads 2 r and 2 r + 1: row r),
// read twice, the second time from L1/L2.
constexpr int kTileThreads = 2 * kFp8Block;
__global__ void __launch_bounds__(kTileThreads)
    quantize_tiles_kernel(const bf16* w, int64_t cols, uint8_t* q, float* scale) {
  __shared__ float warp_max[kTileThreads / 32];
  const int t = int(threadIdx.x);
  const int64_t r = int64_t(blockIdx.y) * kFp8Block + t / 2;
  const int64_t c0 = int64_t(blockIdx.x) * kFp8Block + (t % 2) * (kFp8Block / 2);
  const bf16* src = w + r * cols + c0;
  float amax = 0.f;
  for (int c = 0; c < kFp8Block / 2; c += 8) {
    float f[8];
    detail::load8(src + c, 8, true, f);
#pragma unroll
    for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(f[k]));
  }
  amax = detail::group_amax(amax);
  if (t % 32 == 0) warp_max[t / 32] = amax;
  __syncthreads();
  amax = 0.f;
#pragma unroll
  for (int i = 0; i < kTileThreads / 32; ++i) amax = fmaxf(amax, warp_max[i]);
  const float s = detail::fp8_scale(amax), inv = 1.f / s;
  if (t == 0) scale[int64_t(blockIdx.y) * fp8_tile_scale_ld(cols) + blockIdx.x] = s;
  for (int c = 0; c < kFp8Block / 2; c += 8) {
    float f[8];
    detail::load8(src + c, 8, true, f);
    detail::store_e4m3x8(q + r * cols + c0 + c, f, inv);
  }
}

}  // namespace

cudaError_t quantize_tiles_fp8(const bf16* w, int64_t rows, int64_t cols, uint8_t* q, float* scale,
                               cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (rows % kFp8Block != 0 || cols % kFp8Block != 0 || rows / kFp8Block > 65535 ||
      cols / kFp8Block > INT32_MAX || !detail::aligned16(w) || !detail::aligned(q, 8) || !scale)
    return cudaErrorInvalidValue;
  const dim3 grid(unsigned(cols / kFp8Block), unsigned(rows / kFp8Block));
  quantize_tiles_kernel<<<grid, kTileThreads, 0, stream>>>(w, cols, q, scale);
  return cudaGetLastError();
}

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
