// ForkAttention: varlen causal attention under the tree visibility rule (DESIGN.md "Layers of
// the model, forked"). Query row i of node n attends to every row of n's ancestors and to n's
// own rows up to i. bf16 q/k/v, fp32 softmax and accumulation, GQA (query head h reads kv head
// h / (heads_q / heads_kv)).
//
// Plan/run split (STYLE.md #5): the host groups query rows into tiles whose rows share their
// ancestors (e.g. the rows of sibling questions), so that a tile reads the shared trunk K/V
// once as one dense block and its rows' own spans causally, merging the parts by log-sum-exp.
// The plan is an opaque blob the caller copies to the device before the launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/tree_meta.h"

namespace flide::kernels {

// Host copy of the tree structure the planner needs (mirrors backend/stream.h).
struct HostTree {
  const int32_t* node_parent;  // [N]
  const int32_t* node_offset;  // [N]
  const int32_t* node_length;  // [N]
  const int32_t* token_node;   // [T]
  int32_t n_nodes;
  int32_t n_tokens;
};

// The output gate of query row r's head h: hd values at data + r * row_stride + h * head_stride
// (data 4-byte aligned, strides even). attention_query's qg [R, heads_q * 2 * hd] (per head
// [query | gate]) is {qg + hd, heads_q * 2 * hd, 2 * hd}; a packed gate [R, heads_q * hd] is
// {gate, heads_q * hd, hd}.
struct AttentionGate {
  const __nv_bfloat16* data = nullptr;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};

// The keys of each (tile, kv head) split over CTAs, for few query rows over long paths (the last
// layer's readout rows, one a question: unsplit, a tile's 72 packed rows walk its trunk's 63 key
// blocks and its 18 own nodes on one CTA). Dense CTA s < dense walks the s-th of `dense`
// contiguous shares of the ancestors' key blocks, own CTA j < own the own nodes j, j + own, ... of
// the tile's rows (in offset order); each leaves its rows' unnormalized O, running max and sum in
// `partial`, and a second kernel merges the dense + own parts of a row in that order. A row's own
// nodes are its own node alone, and the blocks a CTA walks for other rows leave its state exactly
// as it was, so a row's result still depends only on its own path (and on dense and own, which the
// caller fixes). partial: attention_split_floats(R, heads_q, head_dim, split) floats.
struct AttentionSplit {
  float* partial = nullptr;
  int dense = 0, own = 0;  // both 0: no split
};
int64_t attention_split_floats(int64_t R, int heads_q, int head_dim, const AttentionSplit& split);

// Upper bound of a plan's tile count, and of its size, for R query rows over a tree of n_nodes
// nodes.
int64_t attention_max_tiles(int64_t R, int32_t n_nodes);
size_t attention_plan_bytes(int64_t R, int32_t n_nodes);

// Writes the plan for query rows (q_rows ? q_rows[r] : r), r < R (host arrays), into `plan`
// (attention_plan_bytes(R, n_nodes) bytes of host memory); returns the bytes used and sets
// *n_tiles to the number of work tiles (the launch's grid depends on it). Returns 0 (and
// *n_tiles = 0) on inconsistent input: a row or node out of range, a row outside its node's span,
// a parent cycle. Tiles never exceed attention_max_tiles(R, n_nodes). Plan layout: attention.cu.
size_t build_attention_plan(const HostTree& tree, const int32_t* q_rows, int64_t R, void* plan,
                            int32_t* n_tiles);

// q/out [R, heads_q * hd]: row r is stream row (q_rows ? q_rows[r] : r), q_rows on the device;
// k/v [T, heads_kv * hd]. plan: the device copy of build_attention_plan's output for the same
// rows. head_dim: 16, 24, 32, 64, 128 or 256. q, k, v, out 16-byte aligned.
// The plan carries each row's stream row, so q_rows is not read on the device. The ancestors'
// spans come from meta.path_begin / path_nodes / node_offset / node_length, which must describe
// the tree the plan was built from. n_tiles may be any upper bound of the plan's tile count (e.g.
// attention_max_tiles(R, n_nodes) for a fixed launch shape under graph capture): CTAs past the
// plan's count return at once. A row's result depends only on its own path (see attention.cu).
// gate (optional): the output is then attention * sigmoid(gate), rounded as sigmoid_mul would
// round it. split (optional, head_dim 256 only): the keys split over CTAs (AttentionSplit).
cudaError_t tree_attention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                           __nv_bfloat16* out, const int32_t* q_rows, int64_t R,
                           const TreeMeta& meta, const void* plan, int32_t n_tiles, int heads_q,
                           int heads_kv, int head_dim, float scale, cudaStream_t stream,
                           const AttentionGate& gate = {}, const AttentionSplit& split = {});

}  // namespace flide::kernels
