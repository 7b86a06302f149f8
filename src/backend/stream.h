// The flat stream: every token of every node of every request in a round, laid out in one
// sequence of rows ordered by tree level (all roots, then all first-level nodes, ...).
// Physical placement is decoupled from visibility: a row of node n sees the rows of n's
// ancestors and its own earlier rows, and nothing else (DESIGN.md "Requests are trees").
// The model builds a Stream, the backend receives it once per round (Ops::set_stream), and
// every op that needs tree structure reads it from there.
#pragma once

#include <cstdint>
#include <vector>

namespace flide {

struct StreamNode {
  int32_t parent = -1;    // index into Stream::nodes; -1 for a root (a trunk)
  int32_t offset = 0;     // first row of this node in the stream
  int32_t length = 0;     // rows (>= 1)
  int32_t level = 0;      // 0 for roots; parent's level + 1 otherwise
  int32_t slot_in = -1;   // recurrent-state / conv-window slot to start from; -1: zero state
  int32_t slot_out = -1;  // slot to write this node's final state / conv window; -1: none
};

struct Stream {
  std::vector<int32_t> token_ids;   // [T]
  std::vector<int32_t> positions;   // [T] position id (continues from the parent's end)
  std::vector<int32_t> token_node;  // [T] node index of each row
  std::vector<StreamNode> nodes;    // [N] ordered by level; offsets increase with the index
  std::vector<int32_t>
      level_begin;      // [L+1] nodes of level l are [level_begin[l], level_begin[l+1])
  int32_t n_slots = 0;  // number of distinct state slots used

  // Selective readout: the rows whose final hidden state feeds the LM head.
  std::vector<int32_t> out_rows;  // [R] stream rows, unique
  // LM-head entries restricted to chosen token ids: logit of token select_ids[m] at out row
  // select_out[m] (an index into out_rows).
  std::vector<int32_t> select_out;  // [M]
  std::vector<int32_t> select_ids;  // [M]
  // The first n_full_out out rows also need the full vocabulary (log-likelihood readouts,
  // `flide logits`); they lead so that they form one contiguous block for the LM head GEMM.
  int32_t n_full_out = 0;

  // Padding to a capacity bucket (engine/round_capacity.h), only at the tail, so that every
  // round of one bucket has the same sizes and replays one CUDA graph: the last pad_tokens rows
  // belong to no node (token_node -1, token id 0, position 0), the last pad_out out rows are row
  // 0 and the last pad_select select entries read out row 0 at id 0. Tree ops (attention, conv,
  // delta rule) compute no padding row, row-wise ops may compute them, and no real row's result
  // depends on them. So that this holds by construction, the attention (over all rows) and the
  // delta rule write zeros to their outputs' padding rows, which then reach the residual as
  // zeros: every padding row stays finite, which the attention relies on where it reads keys
  // and values past a block's end (stream rows that follow, padding included) and masks them
  // with P = 0, as 0 x NaN would not be.
  int32_t pad_tokens = 0;
  int32_t pad_out = 0;
  int32_t pad_select = 0;
  // > 0 on a padded round: a bound on the nodes of any round of its bucket (nodes.size() and
  // every level's count). Backends size their node grids and buffers for it, not for the
  // round's own count, so that launch shapes and addresses depend on the bucket alone.
  int32_t node_capacity = 0;

  int32_t n_tokens() const { return int32_t(token_ids.size()); }
  int32_t n_levels() const { return int32_t(level_begin.size()) - 1; }
  bool padded() const { return node_capacity > 0; }
};

// FLIDE_CHECKs every invariant the ops rely on (sizes, node spans and levels, rows owned by
// their node, slot use within a level — nodes of one level run in parallel, so none may write a
// slot another reads —, readout indices, non-negative ids). Backends call it in set_stream.
void validate_stream(const Stream& s);

// Node n's path, root first and n last: path_nodes[path_begin[n] .. path_begin[n + 1]).
void ancestor_paths(const Stream& s, std::vector<int32_t>& path_begin,
                    std::vector<int32_t>& path_nodes);

}  // namespace flide
