// Gated DeltaNet over one tree level: the causal depthwise conv (+ SiLU) with window slots, and
// the chunked delta rule (chunk 64) with fp32 state slots. Each node of the level starts from its
// slot_in (zeros without one) and, when it has children, writes slot_out. Node ranges come from
// meta.level_begin on the device; launches are sized by meta.max_level_nodes.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/tree_meta.h"

namespace flide::kernels {

// x, out [T, C] bf16 (pre-conv qkv, post conv+SiLU); w [C, K] bf16; window [slots, (K-1)*C]
// bf16, oldest input first. out must not alias x.
cudaError_t causal_conv_silu(const __nv_bfloat16* x, const __nv_bfloat16* w,
                             __nv_bfloat16* window, __nv_bfloat16* out, int64_t C, int K,
                             int level, const TreeMeta& meta, cudaStream_t stream);

// q, k [T, Hk*Dk] bf16 (L2-normed; q is scaled by Dk^-1/2 inside), v [T, Hv*Dv] bf16,
// g, beta [T, Hv] fp32, state [slots, Hv*Dk*Dv] fp32 (per head S[Dk][Dv]), out [T, Hv*Dv] bf16.
// Value head j reads key head j / (Hv / Hk). Math: spec qwen3_5.md §4.1, identical to the CPU
// reference's chunked form up to fp32/bf16 rounding.
cudaError_t gdn_chunked(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const float* g, const float* beta, float* state, __nv_bfloat16* out,
                        int heads_k, int heads_v, int dim_k, int dim_v, int level,
                        const TreeMeta& meta, cudaStream_t stream);

}  // namespace flide::kernels
