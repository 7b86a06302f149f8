// Partial NeoX ("rotate_half") RoPE, in place: in every head, pairs (i, i + rot_dim / 2) for
// i < rot_dim / 2 rotate by pos * inv_freq[i]; dims >= rot_dim pass through (HF
// Qwen3_5TextRotaryEmbedding + apply_rotary_pos_emb, spec §5 step 3).
//
// Numerics. The angle is the fp32 product pos * inv_freq[i] with inv_freq[i] =
// 1 / theta^(2i / rot_dim) in fp32, the values HF builds. That product multiplies any
// error of inv_freq by pos (up to ~2^18), and --use_fast_math would make powf, sinf and cosf the
// approximate __powf / __sinf / __cosf (the latter without range reduction, useless at angles
// of 10^5 rad). So theta^e and sin/cos are evaluated in double and rounded to fp32, which is
// what torch's fp32 pow / cos / sin return to within an ulp. HF then rounds cos/sin to bf16 and
// evaluates the rotation in bf16 (each product and sum rounded); we keep cos/sin and the rotation
// in fp32 and round once at the store, the more accurate of the two and within ~1 bf16 ulp of
// HF. One thread per (row, i) computes its sin/cos once and applies it to every head.
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"

namespace flide::kernels {
namespace {

// Heads rotated per batch of loads, so a thread has several loads in flight before its stores.
constexpr int kHeadsPerBatch = 4;

__global__ void rope_kernel(bf16* x, const int32_t* positions, const int32_t* rows, int64_t n_rows,
                            int heads, int head_dim, int rot_dim, float theta) {
  extern __shared__ float inv_freq[];  // [rot_dim / 2]
  const int half = rot_dim / 2;
  for (int i = int(threadIdx.x); i < half; i += int(blockDim.x)) {
    const float e = __fdiv_rn(float(2 * i), float(rot_dim));
    inv_freq[i] = __fdiv_rn(1.f, float(pow(double(theta), double(e))));
  }
  __syncthreads();

  const int64_t n = n_rows * half;
  const int64_t row_elems = int64_t(heads) * head_dim;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += stride) {
    const int64_t r = idx / half;
    const int i = int(idx - r * half);
    const int32_t pos = positions[rows ? rows[r] : r];
    const float angle = __fmul_rn(float(pos), inv_freq[i]);
    double sin_d, cos_d;
    sincos(double(angle), &sin_d, &cos_d);
    const float c = float(cos_d), s = float(sin_d);

    bf16* p = x + r * row_elems + i;
    for (int h0 = 0; h0 < heads; h0 += kHeadsPerBatch) {
      float x1[kHeadsPerBatch], x2[kHeadsPerBatch];
#pragma unroll
      for (int k = 0; k < kHeadsPerBatch; ++k) {
        if (h0 + k < heads) {
          const bf16* ph = p + int64_t(h0 + k) * head_dim;
          x1[k] = __bfloat162float(ph[0]);
          x2[k] = __bfloat162float(ph[half]);
        }
      }
#pragma unroll
      for (int k = 0; k < kHeadsPerBatch; ++k) {
        if (h0 + k < heads) {
          bf16* ph = p + int64_t(h0 + k) * head_dim;
          ph[0] = __float2bfloat16_rn(x1[k] * c - x2[k] * s);
          ph[half] = __float2bfloat16_rn(x2[k] * c + x1[k] * s);
        }
      }
    }
  }
}

}  // namespace

cudaError_t rope(bf16* x, const int32_t* positions, const int32_t* rows, int64_t n_rows, int heads,
                 int head_dim, int rot_dim, float theta, cudaStream_t stream) {
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_dim) return cudaErrorInvalidValue;
  if (n_rows <= 0 || heads <= 0) return cudaSuccess;
  const int half = rot_dim / 2;
  constexpr int threads = 256;
  rope_kernel<<<detail::blocks_for(n_rows * half, threads), threads, half * sizeof(float),
                stream>>>(x, positions, rows, n_rows, heads, head_dim, rot_dim, theta);
  return cudaGetLastError();
}

}  // namespace flide::kernels
