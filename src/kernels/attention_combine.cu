// The merge of a split attention's records (attention.h AttentionSplit): for each (row, query
// head), the dense + own records of its splits, in split order, by log-sum-exp: with M the largest
// running max and w_s = exp2(m_s - M), O = sum_s w_s O_s and l = sum_s w_s l_s, both in split
// order; then out = O / l, rounded and gated as the unsplit store does (out_pair). A split that
// saw none of a row's keys left max
// kMaxInit and sum 0 (and O 0): its weight is exactly 0 and it adds nothing.
//
// One warp a (row, head): lane i takes columns 2 i, 2 i + 1 of each 64; the records are read once.
#include "kernels/attention_tile.cuh"
#include "kernels/launch.cuh"

namespace flide::kernels::attention_detail {
namespace {

// The (row, head) pair w: warp-wide.
template <int HD>
__device__ __forceinline__ void combine_pair(const Params& p, const SplitParams& sp, int64_t w,
                                             int lane) {
  constexpr int kPairs = HD / 64;  // float2 columns a lane
  const int64_t r = w / p.heads_q;
  const int h = int(w % p.heads_q);
  const int n = sp.n_dense + sp.n_own;
  auto record = [&](int s) {
    return sp.partial + ((int64_t(s) * sp.R + r) * p.heads_q + h) * (HD + 2);
  };
  float m = kMaxInit;
  for (int s = 0; s < n; ++s) m = fmaxf(m, record(s)[HD]);
  float l = 0.f;
  float2 o[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) o[j] = make_float2(0.f, 0.f);
  for (int s = 0; s < n; ++s) {
    const float* rec = record(s);
    const float ws = exp2f(rec[HD] - m);
    l += ws * rec[HD + 1];
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const float2 x = *reinterpret_cast<const float2*>(rec + 64 * j + 2 * lane);
      o[j].x += ws * x.x;
      o[j].y += ws * x.y;
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  bf16* dst = p.out + r * p.heads_q * HD + int64_t(h) * HD + 2 * lane;
  const bf16* gate =
      p.gate.data ? p.gate.data + r * p.gate.row_stride + int64_t(h) * p.gate.head_stride + 2 * lane
                  : nullptr;
#pragma unroll
  for (int j = 0; j < kPairs; ++j)
    *reinterpret_cast<__nv_bfloat162*>(dst + 64 * j) =
        out_pair(o[j].x, o[j].y, inv,
                 gate ? reinterpret_cast<const __nv_bfloat162*>(gate + 64 * j) : nullptr);
}

template <int HD>
__global__ void attention_combine_kernel(const Params p, const SplitParams sp) {
  const int64_t pairs = int64_t(sp.R) * p.heads_q;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t w = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; w < pairs; w += warps)
    combine_pair<HD>(p, sp, w, int(threadIdx.x) % 32);
}

}  // namespace

cudaError_t launch_combine(const Params& p, const SplitParams& sp, int head_dim,
                           cudaStream_t stream) {
  if (head_dim != 256) return cudaErrorInvalidValue;
  constexpr int kThreadsCombine = 256;  // 8 (row, head) pairs a block
  const int64_t threads = int64_t(sp.R) * p.heads_q * 32;
  if (threads == 0) return cudaSuccess;
  attention_combine_kernel<256>
      <<<detail::blocks_for(threads, kThreadsCombine), kThreadsCombine, 0, stream>>>(p, sp);
  return cudaGetLastError();
}

}  // namespace flide::kernels::attention_detail
