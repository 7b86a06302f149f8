// The query and key side of gated attention in one pass over each head (dense.h
// attention_prep): the per-head RMS norm (weight 1 + w), then partial NeoX ("rotate_half") RoPE,
// and for the query the gate half copied out beside it. One pass instead of a split, a norm and a
// rotation: the query rows are read once and written once. The steps and their rounding are
// rope_norm.cuh's.
//
// Work split: a warp per (row, head) task, a lane holding one 8-element chunk of the head
// (head_dim <= kAttentionPrepMaxHeadDim); each warp loads kBatch tasks' chunks (and copies their
// gates) before it computes any, for enough bytes in flight to keep the memory busy. The normed
// head's rotated dims go through the warp's shared-memory slice, where lane i turns the pair (i, i
// + half).
#include "kernels/dense.h"
#include "kernels/rope_norm.cuh"

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
  for (int i = int(threadIdx.x); i < half; i += int(blockDim.x))
    inv_freq[i] = detail::rope_inv_freq(i, a.rot, a.theta);
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
      const detail::Raw<8> raw[1] = {xs[b]};
      float xr[1][8];
      detail::head_rmsnorm8(raw, wv, a.hd, a.eps, xr);
      float(&x)[8] = xr[0];
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
        float x1 = rotated[i], x2 = rotated[i + half];
        detail::rope_turn(pos, inv_freq[i], x1, x2);
        rotated[i] = x1;
        rotated[i + half] = x2;
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
