// The query and key side of gated attention in one pass over each head (dense.h
// attention_prep): the per-head RMS norm (weight 1 + w), then partial NeoX ("rotate_half") RoPE,
// and for the query the gate half copied out beside it. One pass instead of a split, a norm and a
// rotation: the query rows are read once and written once (HF Qwen3_5Attention: q_norm and k_norm,
// then apply_rotary_pos_emb; spec §5 steps 2-3).
//
// Numerics: the sum of squares in fp32 and the normed value x * rsqrt(mean + eps) * (1 + w)
// rounded to bf16 (HF's norm returns the input dtype), then the rotation in fp32 from those
// rounded values, rounded once more. RoPE's angle is the fp32 product pos * inv_freq[i],
// inv_freq[i] = 1 / theta^(2i / rot_dim) in fp32 (theta^e evaluated in double: --use_fast_math
// would make powf the approximate __powf), as HF builds it. That product multiplies any error of
// inv_freq by pos (up to ~2^18 rad), so the angle is reduced to [-pi, pi] in double (exact to
// ~1e-11 rad) before the fast __sincosf (~2^-21 absolute there; without the reduction it is
// useless at 10^5 rad). HF takes torch's fp32 cos / sin, rounds them to bf16 and rotates in bf16;
// we keep cos/sin and the rotation in fp32, within ~1 bf16 ulp of HF.
//
// Work split: a warp per (row, head) task, a lane holding one 8-element chunk of the head
// (head_dim <= kAttentionPrepMaxHeadDim); each warp loads kBatch tasks' chunks (and copies their
// gates) before it computes any, for enough bytes in flight to keep the memory busy. The normed
// head's rotated dims go through the warp's shared-memory slice, where lane i turns the pair (i, i
// + half).
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"

namespace flide::kernels {
namespace {

constexpr int kWarps = 8;  // per block
constexpr int kBatch = 4;  // tasks a warp has in flight

struct PrepArgs {
  const bf16* src;  // row r, head h at src + r * src_ld + h * src_head
  bf16* dst;        // [rows, heads * hd]
  bf16* gate;       // nullptr, or [rows, heads * hd] <- src + r * src_ld + h * src_head + hd
  const bf16* w;    // [hd]
  const int32_t* positions;
  const int32_t* rows;  // nullptr: row r is stream row r
  int64_t n_rows, src_ld, src_head;
  int heads, hd, rot;
  float eps, theta;
  bool vec;  // every pointer and stride allows 16-byte chunks
};

// A warp's shared-memory slice: the normed head's rotated dims in whole chunks (a multiple of 8
// floats keeps every slice and chunk 32-byte aligned).
__host__ __device__ inline int slice_floats(int rot) {
  return (rot + 7) / 8 * 8;
}

__global__ void __launch_bounds__(32 * kWarps, 3) attention_prep_kernel(const PrepArgs a) {
  extern __shared__ __align__(16) float smem[];
  const int half = a.rot / 2;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  float* rotated = smem + warp * slice_floats(a.rot);     // [rot] of the normed head
  float* inv_freq = smem + kWarps * slice_floats(a.rot);  // [half]
  for (int i = int(threadIdx.x); i < half; i += int(blockDim.x)) {
    const float e = __fdiv_rn(float(2 * i), float(a.rot));
    inv_freq[i] = __fdiv_rn(1.f, float(pow(double(a.theta), double(e))));
  }
  __syncthreads();
  const int d0 = 8 * lane, valid = a.hd - d0;
  float wv[8];
  detail::load8(a.w + d0, valid, a.vec, wv);
  const int64_t out_ld = int64_t(a.heads) * a.hd;
  const int64_t tasks = a.n_rows * a.heads;

  // kBatch consecutive tasks a warp: all their chunks are loaded before any is computed.
  for (int64_t first = (int64_t(blockIdx.x) * kWarps + warp) * kBatch; first < tasks;
       first += int64_t(gridDim.x) * kWarps * kBatch) {
    // Task first + b is head h of row r; false past the last task.
    auto task = [&](int b, int64_t& r, int& h) {
      if (first + b >= tasks) return false;
      r = (first + b) / a.heads;
      h = int(first + b - r * a.heads);
      return true;
    };
    detail::Raw<8> xs[kBatch], gs[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      int64_t r;
      int h;
      if (!task(b, r, h)) continue;
      const bf16* src = a.src + r * a.src_ld + h * a.src_head + d0;
      xs[b] = detail::load_raw8(src, valid, a.vec);
      if (a.gate) gs[b] = detail::load_raw8(src + a.hd, valid, a.vec);
    }
    if (a.gate) {  // copied as it is, beside the query
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        int64_t r;
        int h;
        if (!task(b, r, h)) continue;
        detail::store_raw8(a.gate + r * out_ld + int64_t(h) * a.hd + d0, valid, a.vec, gs[b]);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      int64_t r;
      int h;
      if (!task(b, r, h)) continue;
      float x[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) x[k] = detail::raw_at(xs[b], k);
      float sum_sq = 0.f;
#pragma unroll
      for (int k = 0; k < 8; ++k) sum_sq += x[k] * x[k];
      sum_sq = detail::group_sum_lanes(sum_sq, 32);
      const float s = detail::rms_scale(sum_sq, a.hd, a.eps);
#pragma unroll
      for (int k = 0; k < 8; ++k)
        x[k] = __bfloat162float(__float2bfloat16_rn(x[k] * s * (1.f + wv[k])));
      // Only the rotated dims are read back: a whole chunk as two 16-byte stores (a lane's 32
      // bytes are its own, no bank conflicts), a partial one element by element.
      if (d0 < a.rot) {
        if (valid >= 8) {
          float4* c = reinterpret_cast<float4*>(rotated + d0);
          c[0] = make_float4(x[0], x[1], x[2], x[3]);
          c[1] = make_float4(x[4], x[5], x[6], x[7]);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k)
            if (k < valid) rotated[d0 + k] = x[k];
        }
      }
      __syncwarp();
      // Lane i turns the pair (i, i + half) in place: one angle a lane, every lane busy.
      const float pos = float(a.positions[a.rows ? a.rows[r] : r]);
      for (int i = lane; i < half; i += 32) {
        const double angle = double(__fmul_rn(pos, inv_freq[i]));
        const double turns = rint(angle * 0.15915494309189535);  // 1 / (2 pi)
        float sn, cs;
        __sincosf(float(fma(-turns, 6.283185307179586, angle)), &sn, &cs);
        const float x1 = rotated[i], x2 = rotated[i + half];
        rotated[i] = x1 * cs - x2 * sn;
        rotated[i + half] = x2 * cs + x1 * sn;
      }
      __syncwarp();
      if (d0 < a.rot) {
#pragma unroll
        for (int k = 0; k < 8; ++k)
          if (d0 + k < a.rot && k < valid) x[k] = rotated[d0 + k];
      }
      detail::store8(a.dst + r * out_ld + int64_t(h) * a.hd + d0, valid, a.vec, x);
      __syncwarp();  // the slice is read before the next task overwrites it
    }
  }
}

}  // namespace

cudaError_t attention_prep(const bf16* src, int64_t src_ld, int64_t src_head, bf16* dst, bf16* gate,
                           const bf16* w, const int32_t* positions, const int32_t* rows,
                           int64_t n_rows, int heads, int head_dim, int rot_dim, float eps,
                           float theta, cudaStream_t stream) {
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_dim ||
      head_dim > kAttentionPrepMaxHeadDim || heads <= 0)
    return cudaErrorInvalidValue;
  if (n_rows <= 0) return cudaSuccess;
  const bool in_place = src == dst;
  if (in_place && (gate || src_ld != int64_t(heads) * head_dim || src_head != head_dim))
    return cudaErrorInvalidValue;  // in place only row for row, head for head
  const bool vec = head_dim % 8 == 0 && src_ld % 8 == 0 && src_head % 8 == 0 &&
                   detail::aligned16(src) && detail::aligned16(dst) && detail::aligned16(w) &&
                   (!gate || detail::aligned16(gate));
  const size_t smem =
      sizeof(float) * (size_t(rot_dim / 2) + size_t(kWarps) * slice_floats(rot_dim));
  const PrepArgs a{src,      dst,   gate,     w,       positions, rows,  n_rows, src_ld,
                   src_head, heads, head_dim, rot_dim, eps,       theta, vec};
  attention_prep_kernel<<<detail::blocks_for(n_rows * heads, kWarps * kBatch), 32 * kWarps, smem,
                          stream>>>(a);
  return cudaGetLastError();
}

}  // namespace flide::kernels
