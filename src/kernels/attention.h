// ForkAttention: varlen causal attention under the tree visibility rule (DESIGN.md "Layers of
// the model, forked"). Query row i of node n attends to every row of n's ancestors and to n's
// own rows up to i. bf16 q/k/v, fp32 softmax and accumulation, GQA (query head h reads kv head
// h / (heads_q / heads_kv)).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/tree_meta.h"

namespace flide::kernels {

// q/out [R, heads_q * hd]: row r is stream row (q_rows ? q_rows[r] : r); k/v [T, heads_kv * hd].
// workspace: scratch for split-KV partial results, at least attention_workspace_bytes(...).
cudaError_t tree_attention(const __nv_bfloat16* q, const __nv_bfloat16* k,
                           const __nv_bfloat16* v, __nv_bfloat16* out, const int32_t* q_rows,
                           int64_t R, const TreeMeta& meta, int heads_q, int heads_kv,
                           int head_dim, float scale, void* workspace, size_t workspace_bytes,
                           cudaStream_t stream);
size_t attention_workspace_bytes(int64_t R, int64_t T, int heads_q, int head_dim);

}  // namespace flide::kernels
