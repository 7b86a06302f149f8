// Launchers of the token-parallel kernels: bf16 activations and weights, fp32 arithmetic
// inside each kernel, one rounding to bf16 per output (spec qwen3_5.md §6). Each takes raw
// pointers, sizes and a stream, allocates nothing, and returns the launch status.
// Empty inputs launch nothing. Any bf16 alignment works: 16-byte aligned pointers (and rows of a
// multiple of 8 elements for the row kernels) take a vectorised path that gives the same bits.
// Row reductions (norms, select_logits) depend only on the row, never on the batch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/tree_meta.h"

namespace flide::kernels {

using bf16 = __nv_bfloat16;

// An FP8 e4m3 matrix [rows, K] with a float scale a row: element (r, c) stands for
// scale[r] * e4m3(data[r K + c]). For a weight [N, K] a row is an output column, and its scales
// must be 16-byte aligned. The products' operands under --quantization fp8 (the *_fp8 launchers
// below, gdn.h gdn_qkv_conv_fp8).
struct Fp8Rows {
  const uint8_t* data = nullptr;
  const float* scale = nullptr;
};
// An FP8 e4m3 matrix [rows, K] with a float scale a row and 128-column block, for cuBLASLt's
// block-scaled GEMM (VEC128_32F scales): element (r, c) stands for
// scale[fp8_block_scale_at(r, c / 128, rows, K / 128)] * e4m3(data[r K + c]). What
// swiglu_gemm_fp8 and z_gated_rmsnorm_fp8 write for the products that read their output (the
// output projections, CudaOps::matmul_add), each block quantized as a group (fp8_rows.cuh).
struct Fp8Blocks {
  uint8_t* data = nullptr;
  float* scale = nullptr;
};
constexpr int kFp8Block = 128;
// cuBLASLt reads a block-scaled operand's scales block by block at a stride of its row count,
// and takes only row counts that are multiples of 4. So the first rows / 4 * 4 rows are one such
// operand, their scales [blocks][rows / 4 * 4], and the last 1-3 rows, if any, another of 4
// rows, their scales [blocks][4] after those (the product runs on each in turn, CudaOps). Where
// row r's scale of block b sits; a tensor of `rows` rows holds fp8_block_rows(rows) rows of data
// and blocks x fp8_block_rows(rows) scales (a tail operand's rows past the last are read, and
// their products dropped).
__host__ __device__ constexpr int64_t fp8_block_rows(int64_t rows) {
  return (rows + 3) / 4 * 4;
}
__host__ __device__ constexpr int64_t fp8_block_scale_at(int64_t r, int64_t b, int64_t rows,
                                                         int64_t blocks) {
  const int64_t body = rows / 4 * 4;
  return r < body ? b * body + r : blocks * body + b * 4 + (r - body);
}
// w [rows, cols] bf16 to q [rows, cols] e4m3 and scale [rows / 128, fp8_tile_scale_ld(cols)]
// (row-major), a 128 x 128 tile a group (fp8_rows.cuh): the weights of the products that read
// Fp8Blocks, as cuBLASLt's BLK128x128_32F scales take them, whose rows it reads 16-byte aligned
// (with 2 tiles a row, it read the second row's from the fourth float). rows and cols multiples
// of 128, w 16-byte and q 8-byte aligned.
__host__ __device__ constexpr int64_t fp8_tile_scale_ld(int64_t cols) {
  return (cols / kFp8Block + 3) / 4 * 4;
}
cudaError_t quantize_tiles_fp8(const bf16* w, int64_t rows, int64_t cols, uint8_t* q, float* scale,
                               cudaStream_t stream);
// x [rows, cols] bf16 to q [rows, cols] e4m3 and scale [rows] (quantize_fp8.cu): each row's
// largest magnitude becomes 448, the rest round to nearest-even. cols a multiple of 8, x 16-byte
// and q 8-byte aligned.
cudaError_t quantize_rows_fp8(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scale,
                              cudaStream_t stream);

// out[t, :] = table[ids[t], :]; out [T, H]
cudaError_t embed(const int32_t* ids, const bf16* table, bf16* out, int64_t T, int64_t H,
                  cudaStream_t stream);
// out[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * (unit_offset ? 1 + w : w); out may alias x.
cudaError_t rmsnorm(const bf16* x, const bf16* w, bf16* out, int64_t rows, int64_t dim, float eps,
                    bool unit_offset, cudaStream_t stream);
// rmsnorm (unit_offset as rmsnorm) and quantize_rows_fp8 of its output in one pass: out gets
// rmsnorm's bits, q and scale quantize_rows_fp8's of out. rmsnorm_fp8_supported: dim a multiple
// of 16 above 256 and up to 1,024 (a warp a row), x, w and out 16-byte aligned (q too, or the
// launch fails); otherwise the two launches.
bool rmsnorm_fp8_supported(const void* x, const void* w, const void* out, int64_t dim);
cudaError_t rmsnorm_fp8(const bf16* x, const bf16* w, bf16* out, uint8_t* q, float* scale,
                        int64_t rows, int64_t dim, float eps, bool unit_offset,
                        cudaStream_t stream);
// out = silu(gate) * up; out may alias gate or up
cudaError_t silu_mul(const bf16* gate, const bf16* up, bf16* out, int64_t n, cudaStream_t stream);
// out = silu(x . w_gate^T) * (x . w_up^T), the MLP's gate, up and SwiGLU in one Hopper GEMM
// (swiglu_gemm.cu), rounded as the three steps unfused: x [M, K], w_gate and w_up [N, K], out
// [M, N]. swiglu_gemm_supported says whether the kernel takes these pointers and sizes (16-byte
// alignment, N a multiple of 128, K of 8); otherwise run the two matmuls and silu_mul.
bool swiglu_gemm_supported(const void* x, const void* w_gate, const void* w_up, const void* out,
                           int64_t N, int64_t K);
cudaError_t swiglu_gemm(const bf16* x, const bf16* w_gate, const bf16* w_up, bf16* out, int64_t M,
                        int64_t N, int64_t K, cudaStream_t stream);
// swiglu_gemm on FP8 operands: gate and up are the products scaled by their rows' and columns'
// scales, rounded to bf16, then as above. The same shapes, K a multiple of 16. With out8.data,
// the bf16 outputs go to out8 as Fp8Blocks instead of to out (which may be null).
cudaError_t swiglu_gemm_fp8(Fp8Rows x, Fp8Rows w_gate, Fp8Rows w_up, bf16* out, Fp8Blocks out8,
                            int64_t M, int64_t N, int64_t K, cudaStream_t stream);
// x *= sigmoid(gate)
cudaError_t sigmoid_mul(bf16* x, const bf16* gate, int64_t n, cudaStream_t stream);
// out[r, :] = x[rows[r], :]; out [R, cols]. Works for bf16 and fp32 (elem_bytes 2 or 4).
cudaError_t gather_rows(const void* x, const int32_t* rows, void* out, int64_t R, int64_t cols,
                        int elem_bytes, cudaStream_t stream);
// x[r, :] = 0 for every r < rows with token_node[r] < 0 (a padded round's tail rows, which
// belong to no node); the other rows are left as they are. x [rows, cols].
cudaError_t zero_rows_of_no_node(bf16* x, int64_t rows, int64_t cols, const int32_t* token_node,
                                 cudaStream_t stream);
// Gated attention's query or key side (attention_prep.cu): per row r and head h, the head_dim
// values at src + r * src_ld + h * src_head are RMS-normed with weight 1 + w (rounded to bf16),
// then NeoX rotate-half RoPE turns their first rot_dim dims by position
// positions[rows ? rows[r] : r] (rounded again), into dst [n_rows, heads * head_dim]. With a
// gate, the head_dim values after each head's (the query's gate half) are copied to gate [n_rows,
// heads * head_dim]. dst may be src only without a gate and with src packed like dst (the keys,
// in place). cudaErrorInvalidValue unless 0 < rot_dim <= head_dim <= kAttentionPrepMaxHeadDim
// and rot_dim is even.
constexpr int kAttentionPrepMaxHeadDim = 256;  // a lane holds one 8-element chunk of a head
cudaError_t attention_prep(const bf16* src, int64_t src_ld, int64_t src_head, bf16* dst, bf16* gate,
                           const bf16* w, const int32_t* positions, const int32_t* rows,
                           int64_t n_rows, int heads, int head_dim, int rot_dim, float eps,
                           float theta, cudaStream_t stream);
// A gated attention layer's projections in one GEMM (attention_proj_gemm.cu): qg = h . w_q^T, k =
// h . w_k^T, v = h . w_v^T rounded to bf16 as matmul rounds them, then q and gate as
// attention_prep makes them from qg (norm weight q_norm) and k as it makes it in place (k_norm),
// by the positions of rows 0 .. M - 1. h [M, K], w_q [2 heads_q head_dim, K] (per head [query |
// gate]), w_k and w_v [heads_kv head_dim, K], q and gate [M, heads_q head_dim], k and v [M,
// heads_kv head_dim]. attention_projections_supported says whether the kernel takes these (head_dim
// 256, 16-byte alignment, K a multiple of 8, an even rot_dim <= head_dim); otherwise run the
// three matmuls and attention_prep.
bool attention_projections_supported(const void* h, const void* w_q, const void* w_k,
                                     const void* w_v, const void* q_norm, const void* k_norm,
                                     const void* q, const void* gate, const void* k, const void* v,
                                     int64_t K, int head_dim, int rot_dim);
cudaError_t attention_projections(const bf16* h, const bf16* w_q, const bf16* w_k, const bf16* w_v,
                                  const bf16* q_norm, const bf16* k_norm, const int32_t* positions,
                                  bf16* q, bf16* gate, bf16* k, bf16* v, int64_t M, int64_t K,
                                  int heads_q, int heads_kv, int head_dim, int rot_dim, float eps,
                                  float theta, cudaStream_t stream);
// attention_projections on FP8 operands (as swiglu_gemm_fp8; K a multiple of 16).
cudaError_t attention_projections_fp8(Fp8Rows h, Fp8Rows w_q, Fp8Rows w_k, Fp8Rows w_v,
                                      const bf16* q_norm, const bf16* k_norm,
                                      const int32_t* positions, bf16* q, bf16* gate, bf16* k,
                                      bf16* v, int64_t M, int64_t K, int heads_q, int heads_kv,
                                      int head_dim, int rot_dim, float eps, float theta,
                                      cudaStream_t stream);
// g = -exp(A_log) * softplus(a + dt_bias) (fp32), beta = sigmoid(b) (fp32); ab [T, 2 Hv] bf16
// holds a | b side by side; g, beta [T, Hv]; A_log, dt_bias [Hv] bf16.
cudaError_t gdn_gates(const bf16* ab, const bf16* A_log, const bf16* dt_bias, float* g, float* beta,
                      int64_t T, int Hv, cudaStream_t stream);
// out = rmsnorm(o) * w * silu(z) per row of [rows, dim]; w plain (not 1 + w).
cudaError_t gated_rmsnorm(const bf16* o, const bf16* z, const bf16* w, bf16* out, int64_t rows,
                          int64_t dim, float eps, cudaStream_t stream);
// gated_rmsnorm with its gate computed in the same GEMM (z_gated_rmsnorm.cu): z = h . w_z^T,
// then per head of head_dim columns out = rmsnorm(o) * w * silu(z), z rounded to bf16 first as
// the product's output would be. h [M, K], w_z [Vd, K], o and out [M, Vd], w [head_dim].
// z_gated_rmsnorm_supported says whether the kernel takes these (head_dim 128, 16-byte
// alignment, Vd a multiple of 256, K of 8); otherwise run matmul and gated_rmsnorm.
bool z_gated_rmsnorm_supported(const void* h, const void* w_z, const void* o, const void* w,
                               const void* out, int64_t Vd, int64_t K, int64_t head_dim);
cudaError_t z_gated_rmsnorm(const bf16* h, const bf16* w_z, const bf16* o, const bf16* w, bf16* out,
                            int64_t M, int64_t Vd, int64_t K, int64_t head_dim, float eps,
                            cudaStream_t stream);
// z_gated_rmsnorm on FP8 operands (as swiglu_gemm_fp8; K a multiple of 16, and out8 as there).
cudaError_t z_gated_rmsnorm_fp8(Fp8Rows h, Fp8Rows w_z, const bf16* o, const bf16* w, bf16* out,
                                Fp8Blocks out8, int64_t M, int64_t Vd, int64_t K, int64_t head_dim,
                                float eps, cudaStream_t stream);
// out[m] = dot(h[select_out[m]], w[select_ids[m]]) in fp32; h [R, H], w [V, H].
cudaError_t select_logits(const bf16* h, const bf16* w, const int32_t* select_out,
                          const int32_t* select_ids, float* out, int64_t M, int64_t H,
                          cudaStream_t stream);
// bf16 <-> fp32 conversions for host transfers.
cudaError_t f32_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream);
cudaError_t bf16_to_f32(const bf16* in, float* out, int64_t n, cudaStream_t stream);

}  // namespace flide::kernels
