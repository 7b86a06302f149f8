// Gated DeltaNet over one tree level: the causal depthwise conv (+ SiLU, split into q, k, v, with
// the q/k L2 norm) with window slots, and the chunked delta rule (chunk 64) with fp32 state
// slots. Each node of the level starts from its slot_in (zeros without one) and, when it has
// children, writes slot_out. Node ranges come from meta.level_begin on the device; launch shapes
// depend only on meta's sizes (n_tokens, max_level_nodes) and the device's SM count, so a call
// can be graph-captured.
//
// gdn_chunked runs three kernels on `stream` (spec qwen3_5.md §4.1, fla's decomposition):
//   plan    one block lists the level's chunks (node, first row); chunks start at each node's
//           first row and the last one of a node may be short, exactly as the CPU reference;
//   prepare one block per (chunk, value head), all in parallel: in-chunk cumulative gamma,
//           T = (I + A)^-1 (A = strictly lower beta_i (k_i.k_j) exp(gamma_i - gamma_j)) and
//           P = (q_i.k_j) Dk^-1/2 exp(gamma_i - gamma_j) (j <= i), stored in bf16 to the
//           workspace;
//   state   one block per (node, value head, 64 of its value columns): a warpgroup on wgmma,
//           a second one staging the chunks two ahead, walks the node's chunks in order with the
//           state, transposed, in registers:
//           v_new = T (beta V - beta exp(gamma) K S), i.e. fla's U - W S without forming
//           W = T (beta exp(gamma) K) and U = T (beta V) (32 times T's bytes),
//           out = Dk^-1/2 exp(gamma) (q S) + P v_new, S = exp(gamma_last) S +
//           sum_j exp(gamma_last - gamma_j) k_j v_new_j^T; only this loop is sequential.
// Products run on tensor cores with fp32 accumulation. Those of the state kernel all take bf16
// operands (wgmma m64n64k16): K, q and V as they are; the state, beta V - beta exp(gamma) K S and
// v_new rounded from fp32 as they enter a product; T and P as the prepare kernel stores them.
// That is fla's rounding (its chunked kernels cast the same factors to the inputs' dtype), i.e.
// what HF transformers and vLLM compute on the GPU. The prepare kernel's Gram products (K K^T,
// Q K^T) are exact bf16 products too; its triangular inverse runs in fp32 and tf32 (m16n8k8).
// The state itself accumulates in fp32. No atomics: results are deterministic and do not depend
// on which other nodes share the level.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dense.h"
#include "kernels/tree_meta.h"

namespace flide::kernels {

// The conv + SiLU of the GDN layer, written split, with the q/k L2 norm as its epilogue:
// x [T, C] bf16 is the pre-conv projection [q | k | v], C = 2 Kd + Vd with Kd = heads_k * dim_k
// and Vd = value_dim; w [C, K] bf16; window [slots, (K-1)*C] bf16, raw inputs, oldest first.
// q, k [T, Kd] and v [T, Vd] bf16 receive the conv's channels [0, Kd), [Kd, 2 Kd), [2 Kd, C),
// each dim_k-wide head of q and k as y / sqrt(sum(y^2) + eps) with y the SiLU output rounded to
// bf16 (fp32 sum). No output may overlap x. K <= 8. A node may read and write the same window
// slot. A key head must fit one warp at the widest vector width the shapes and pointers allow:
// dim_k <= 32, or <= 64 with dim_k, value_dim even and 4-byte aligned pointers, or <= 128 with
// both multiples of 4 and 8-byte aligned pointers, or <= 256 with both multiples of 8 and
// 16-byte aligned pointers (the fastest case, taken whenever it applies).
// Else cudaErrorInvalidValue (shapes: gdn_conv_shape_ok says which) or
// cudaErrorMisalignedAddress (pointers).
cudaError_t gdn_conv(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* window,
                     __nv_bfloat16* q, __nv_bfloat16* k, __nv_bfloat16* v, int heads_k, int dim_k,
                     int64_t value_dim, int K, float eps, int level, const TreeMeta& meta,
                     cudaStream_t stream);
// The projection and the conv in one GEMM (gdn_qkv_conv.cu) over one tree level:
// gdn_conv(x w_qkv^T, ...) with the product rounded to bf16 as a matmul would store it; x [T, H],
// w_qkv [C, H], the rest as gdn_conv with K = 4. gdn_qkv_conv_supported says whether the kernel
// takes these pointers and sizes (16-byte alignment, dim_k = 128, C a multiple of 256, H of 8,
// K = 4). No node of the level may read and write the same window slot (the caller runs such
// levels unfused).
bool gdn_qkv_conv_supported(const void* x, const void* w_qkv, const void* w_conv,
                            const void* window, const void* q, const void* k, const void* v,
                            int64_t H, int heads_k, int dim_k, int64_t value_dim, int K);
cudaError_t gdn_qkv_conv(const __nv_bfloat16* x, const __nv_bfloat16* w_qkv,
                         const __nv_bfloat16* w_conv, __nv_bfloat16* window, __nv_bfloat16* q,
                         __nv_bfloat16* k, __nv_bfloat16* v, int64_t T, int64_t H, int heads_k,
                         int dim_k, int64_t value_dim, float eps, int level, const TreeMeta& meta,
                         cudaStream_t stream);
// gdn_qkv_conv on FP8 operands (dense.h Fp8Rows; H a multiple of 16): the product scaled by its
// rows' and columns' scales, rounded to bf16, then as above.
cudaError_t gdn_qkv_conv_fp8(Fp8Rows x, Fp8Rows w_qkv, const __nv_bfloat16* w_conv,
                             __nv_bfloat16* window, __nv_bfloat16* q, __nv_bfloat16* k,
                             __nv_bfloat16* v, int64_t T, int64_t H, int heads_k, int dim_k,
                             int64_t value_dim, float eps, int level, const TreeMeta& meta,
                             cudaStream_t stream);
// Whether gdn_conv takes a key head of dim_k with value width value_dim at some vector width
// (suitably aligned pointers given): the shape rule above.
bool gdn_conv_shape_ok(int dim_k, int64_t value_dim);

// Bytes of device scratch gdn_chunked needs for a stream of up to T rows (any T >= the
// meta.n_tokens it is called with): bf16 T [Hv][T][64], P [Hv][T][64], fp32 gamma [Hv][T] and
// the chunk list, i.e. about 4 * Hv * T * 65 bytes (26 MB for Hv = 16, T = 6260), whatever the
// head dims. Nothing in it outlives a call, so every GDN layer (and every level) can share one
// buffer as long as the calls are ordered on one stream.
size_t gdn_workspace_bytes(int64_t T, int heads_v);

// q, k [T, Hk*Dk] bf16 (L2-normed; q is scaled by Dk^-1/2 inside), v [T, Hv*Dv] bf16,
// g, beta [T, Hv] fp32, state [slots, Hv*Dk*Dv] fp32 (per head S[Dk][Dv]), out [T, Hv*Dv] bf16.
// workspace: gdn_workspace_bytes(T, heads_v) bytes, 256-byte aligned.
// Value head j reads key head j / (Hv / Hk). Math: spec qwen3_5.md §4.1, identical to the CPU
// reference's chunked form up to fp32/tf32/bf16 rounding. Dk and Dv each in {8, 12, 16, 24} or
// both 128 (else cudaErrorInvalidValue); q, k, v 16-byte aligned (8 when the head dim is not a
// multiple of 8) and out 4-byte aligned, 16 where Dv is a multiple of 8 (else
// cudaErrorMisalignedAddress). A node may read and write the same state slot.
cudaError_t gdn_chunked(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const float* g, const float* beta, float* state, __nv_bfloat16* out,
                        void* workspace, int heads_k, int heads_v, int dim_k, int dim_v, int level,
                        const TreeMeta& meta, cudaStream_t stream);

}  // namespace flide::kernels
