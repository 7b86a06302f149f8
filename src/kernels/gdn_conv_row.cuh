// One row of the Gated DeltaNet conv for the kVec channels a thread owns, shared by the conv
// kernel (gdn_conv.cu) and the projection's fused epilogue (gdn_qkv_conv.cu) so that both give
// the same bits: the K-tap causal conv over the thread's history and the row's input, the SiLU
// rounded to bf16 (the value an unfused conv would have stored), then each q / k head's L2 norm.
#pragma once

#include "kernels/bf16x8.cuh"

namespace flide::kernels::detail {

// Taps held as fp32, wt[j][v].
template <int K, int kVec>
struct FloatTaps {
  float w[K][kVec];
  __device__ __forceinline__ float operator()(int j, int v) const { return w[j][v]; }
};
// Taps held as raw bf16, element v * K + j of a channel-major [kVec][K] row of w (two to a
// word), widened on use: half the registers of FloatTaps.
template <int K, int kVec>
struct Bf16Taps {
  uint32_t w[(K * kVec + 1) / 2];
  __device__ __forceinline__ float operator()(int j, int v) const {
    const int e = v * K + j;
    return __uint_as_float(e % 2 ? w[e / 2] & 0xffff0000u : w[e / 2] << 16);
  }
};

// Conv and SiLU of one row: y_v = silu(sum_j wt(j, v) in(j, v)), rounded to bf16 and packed (the
// values an unfused conv stores), over the K inputs in(j, v) of channel v, oldest first
// (in(K - 1, v): the row's own). Packed two to an instruction, and a v channel's epilogue stores
// them as they are. Every caller goes through here, so that the conv kernel and the fused
// epilogue give the same bits.
template <int K, int kVec, class Taps, class In>
__device__ __forceinline__ Raw<kVec> conv_silu(const Taps& wt, const In& in) {
  float s[kVec];
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    float acc = 0.f;  // same order as the CPU: oldest input first
#pragma unroll
    for (int j = 0; j < K; ++j) acc += wt(j, v) * in(j, v);
    s[v] = acc / (1.f + __expf(-acc));
  }
  Raw<kVec> y;
#pragma unroll
  for (int i = 0; i < (kVec + 1) / 2; ++i)
    y.h[i] =
        2 * i + 1 < kVec ? pack_bf16(s[2 * i], s[2 * i + 1]) : pack_bf16(s[2 * i], 0.f) & 0xffffu;
  return y;
}

// A row's packed values widened to fp32 (exact) into y; returns the sum of their squares (fp32,
// in channel order), for the q / k norm.
template <int kVec>
__device__ __forceinline__ float widen_sum_sq(const Raw<kVec>& r, float (&y)[kVec]) {
  float sum_sq = 0.f;
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    y[v] = raw_at(r, v);
    sum_sq = fmaf(y[v], y[v], sum_sq);
  }
  return sum_sq;
}

// conv_silu of one row from the K-1 previous inputs hist (oldest first) and this row's input xr,
// which then enters hist. wt(j, v): tap j of channel v as fp32 (tap K - 1 multiplies the current
// row).
template <int K, int kVec, class Taps>
__device__ __forceinline__ float conv_silu_row(const Taps& wt,
                                               float (&hist)[K > 1 ? K - 1 : 1][kVec],
                                               const Raw<kVec>& xr, float (&y)[kVec]) {
  const float sum_sq = widen_sum_sq<kVec>(
      conv_silu<K, kVec>(wt, [&](int j, int v) { return j < K - 1 ? hist[j][v] : raw_at(xr, v); }),
      y);
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
#pragma unroll
    for (int j = 0; j + 1 < K - 1; ++j) hist[j][v] = hist[j + 1][v];
    if constexpr (K > 1) hist[K - 2][v] = raw_at(xr, v);
  }
  return sum_sq;
}

// The L2 norm of a q or k head spread over aligned groups of `group` lanes: y / sqrt(sum of the
// group's squares + eps). All 32 lanes call it (the shuffles); lanes with qk false (v channels)
// keep y.
template <int kVec>
__device__ __forceinline__ void qk_norm(float (&y)[kVec], float sum_sq, int group, bool qk,
                                        float eps) {
  sum_sq = group_sum_lanes(sum_sq, group);
  if (qk) {
    const float s = rsqrtf(sum_sq + eps);
#pragma unroll
    for (int v = 0; v < kVec; ++v) y[v] *= s;
  }
}

}  // namespace flide::kernels::detail
