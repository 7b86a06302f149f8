// Rows of bf16 to FP8 e4m3 with a float scale a row (dense.h quantize_rows_fp8): the operands of
// the FP8 products (tma_gemm.cuh), activations each round and weights once at load, quantized as
// fp8_rows.cuh says. A row's bytes and scale depend only on the row.
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
