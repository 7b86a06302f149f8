// Builds a round's flat Stream from nodes given in any order (parents first): orders them by
// level, assigns stream offsets, positions and state slots, and collects readout rows —
// full-vocabulary rows first, then rows read only at chosen token ids, each row once.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "backend/stream.h"

namespace flide {

class StreamAssembler {
 public:
  // Returns the node's handle. Its positions continue from the parent's end.
  int32_t add_node(int32_t parent, std::vector<int32_t> tokens);
  int32_t node_length(int32_t node) const { return int32_t(nodes_[node].tokens.size()); }

  // Readout at token `index` of `node`: logits of `ids` there; returns the index of the first
  // entry in ReadoutLogits::selected (the rest follow in order).
  int32_t read_selected(int32_t node, int32_t index, const std::vector<int32_t>& ids);
  // Readout at token `index` of `node`: full-vocabulary logits; returns the row in
  // ReadoutLogits::full.
  int32_t read_full(int32_t node, int32_t index);

  Stream finish() const;

 private:
  struct Node {
    int32_t parent;
    int32_t level;
    int32_t position;  // of the first token
    int32_t n_children = 0;
    std::vector<int32_t> tokens;
  };
  using RowRef = std::pair<int32_t, int32_t>;  // (node, token index)

  std::vector<Node> nodes_;
  std::map<RowRef, int32_t> full_rows_;  // row -> index in ReadoutLogits::full
  std::vector<RowRef> select_rows_;      // one per selected entry
  std::vector<int32_t> select_ids_;
};

}  // namespace flide
