// Selective readout: the few logits a round asks for, each the dot product of one out row's
// final hidden state with one LM-head row. One warp per selected entry streams both rows in
// 16-byte chunks and accumulates in fp32; chunk c goes to lane c % 32, summed in ascending order,
// then a butterfly, so each logit depends only on its two rows (bf16x8.cuh).
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"

namespace flide::kernels {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void select_logits_kernel(const bf16* h, const bf16* w, const int32_t* select_out,
                                     const int32_t* select_ids, float* out, int64_t M, int64_t H,
                                     bool vec) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t n_chunks = (H + 7) / 8;
  const int64_t n_warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t m = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; m < M; m += n_warps) {
    const bf16* hr = h + int64_t(select_out[m]) * H;
    const bf16* wr = w + int64_t(select_ids[m]) * H;
    float acc = 0.f;
#pragma unroll 4
    for (int64_t c = lane; c < n_chunks; c += 32) {
      float a[8], b[8];
      detail::load8(hr + 8 * c, H - 8 * c, vec, a);
      detail::load8(wr + 8 * c, H - 8 * c, vec, b);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc = fmaf(a[k], b[k], acc);
    }
    acc = detail::group_sum_lanes(acc, 32);
    if (lane == 0) out[m] = acc;
  }
}

}  // namespace

cudaError_t select_logits(const bf16* h, const bf16* w, const int32_t* select_out,
                          const int32_t* select_ids, float* out, int64_t M, int64_t H,
                          cudaStream_t stream) {
  if (M <= 0) return cudaSuccess;
  const bool vec = H % 8 == 0 && detail::aligned16(h) && detail::aligned16(w);
  constexpr int threads = 32 * kWarpsPerBlock;
  select_logits_kernel<<<detail::blocks_for(M, kWarpsPerBlock), threads, 0, stream>>>(
      h, w, select_out, select_ids, out, M, H, vec);
  return cudaGetLastError();
}

}  // namespace flide::kernels
