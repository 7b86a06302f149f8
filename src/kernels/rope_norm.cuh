// The query and key heads' RMS norm (weight 1 + w) and partial NeoX ("rotate_half") RoPE as a
// warp's lanes compute them, each lane holding one 8-element chunk of a head. attention_prep.cu
// runs these steps over rows in memory and attention_proj_gemm.cu over a GEMM's staged tile:
// written once, they round alike in both, bit for bit.
//
// Numerics (HF Qwen3_5Attention: q_norm and k_norm, then apply_rotary_pos_emb; spec §5 steps
// 2-3): the sum of squares in fp32 and the normed value x * rsqrt(mean + eps) * (1 + w) rounded to
// bf16 (HF's norm returns the input dtype), then the rotation in fp32 from those rounded values.
// RoPE's angle is the fp32 product pos * inv_freq[i], inv_freq[i] = 1 / theta^(2i / rot_dim) in
// fp32 (theta^e evaluated in double: --use_fast_math would make powf the approximate __powf), as
// HF builds it. That product multiplies any error of inv_freq by pos (up to ~2^18 rad), so the
// angle is reduced to [-pi, pi] in double (exact to ~1e-11 rad) before the fast __sincosf
// (~2^-21 absolute there; without the reduction it is useless at 10^5 rad). HF takes torch's
// fp32 cos / sin, rounds them to bf16 and rotates in bf16; we keep cos/sin and the rotation in
// fp32, within ~1 bf16 ulp of HF.
#pragma once

#include "kernels/bf16x8.cuh"

namespace flide::kernels::detail {

// RoPE's inverse frequency of the pair (i, i + rot_dim / 2).
__device__ __forceinline__ float rope_inv_freq(int i, int rot_dim, float theta) {
  const float e = __fdiv_rn(float(2 * i), float(rot_dim));
  return __fdiv_rn(1.f, float(pow(double(theta), double(e))));
}

// The lane's chunks raw[q] of kRows heads of head_dim values each (the warp's 32 lanes hold whole
// heads; lanes past one hold zeros), normed into x[q] and rounded to bf16: each head's squares
// summed by group_sum_sq_rows (the lane's order, then the butterfly). w: the norm weight's chunk.
template <int kRows>
__device__ __forceinline__ void head_rmsnorm8(const Raw<8> (&raw)[kRows], const float (&w)[8],
                                              int head_dim, float eps, float (&x)[kRows][8]) {
  float sum_sq[kRows];
  group_sum_sq_rows(raw, 32, sum_sq);
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    const float s = rms_scale(sum_sq[q], head_dim, eps);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      x[q][k] = __bfloat162float(__float2bfloat16_rn(raw_at(raw[q], k) * s * (1.f + w[k])));
  }
}

// The pair (x1, x2) = dims (i, i + rot_dim / 2) of a normed head turned by pos * inv_freq[i].
__device__ __forceinline__ void rope_turn(float pos, float inv_freq, float& x1, float& x2) {
  const double angle = double(__fmul_rn(pos, inv_freq));
  const double turns = rint(angle * 0.15915494309189535);  // 1 / (2 pi)
  float sn, cs;
  __sincosf(float(fma(-turns, 6.283185307179586, angle)), &sn, &cs);
  const float a = x1, b = x2;
  x1 = a * cs - b * sn;
  x2 = b * cs + a * sn;
}

}  // namespace flide::kernels::detail
