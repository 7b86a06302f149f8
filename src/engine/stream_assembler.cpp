#include "engine/stream_assembler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace flide {

int32_t StreamAssembler::add_node(int32_t parent, std::vector<int32_t> tokens) {
  FLIDE_CHECK(parent < int32_t(nodes_.size()), "parents come before their children");
  FLIDE_CHECK(!tokens.empty());
  Node node{parent, 0, 0, 0, std::move(tokens)};
  if (parent >= 0) {
    Node& p = nodes_[parent];
    node.level = p.level + 1;
    node.position = p.position + int32_t(p.tokens.size());
    ++p.n_children;
  }
  nodes_.push_back(std::move(node));
  return int32_t(nodes_.size()) - 1;
}

int32_t StreamAssembler::read_selected(int32_t node, int32_t index,
                                       const std::vector<int32_t>& ids) {
  FLIDE_CHECK(index >= 0 && index < node_length(node));
  int32_t first = int32_t(select_ids_.size());
  for (int32_t id : ids) {
    select_rows_.emplace_back(node, index);
    select_ids_.push_back(id);
  }
  return first;
}

int32_t StreamAssembler::read_full(int32_t node, int32_t index) {
  FLIDE_CHECK(index >= 0 && index < node_length(node));
  auto [it, inserted] = full_rows_.try_emplace({node, index}, int32_t(full_rows_.size()));
  return it->second;
}

Stream StreamAssembler::finish() const {
  Stream s;
  const int32_t n_nodes = int32_t(nodes_.size());
  std::vector<int32_t> order(n_nodes);  // stream node index -> handle, by level
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return nodes_[a].level < nodes_[b].level; });
  std::vector<int32_t> stream_index(n_nodes);
  for (int32_t i = 0; i < n_nodes; ++i) stream_index[order[i]] = i;

  s.nodes.resize(n_nodes);
  int32_t offset = 0;
  for (int32_t i = 0; i < n_nodes; ++i) {
    const Node& node = nodes_[order[i]];
    StreamNode& out = s.nodes[i];
    out.parent = node.parent < 0 ? -1 : stream_index[node.parent];
    out.offset = offset;
    out.length = int32_t(node.tokens.size());
    out.level = node.level;
    if (node.n_children > 0) out.slot_out = s.n_slots++;
    if (out.parent >= 0) out.slot_in = s.nodes[out.parent].slot_out;
    while (int32_t(s.level_begin.size()) <= node.level) s.level_begin.push_back(i);
    for (int32_t t = 0; t < out.length; ++t) {
      s.token_ids.push_back(node.tokens[t]);
      s.positions.push_back(node.position + t);
      s.token_node.push_back(i);
    }
    offset += out.length;
  }
  s.level_begin.push_back(n_nodes);

  auto row_of = [&](const RowRef& ref) {
    return s.nodes[stream_index[ref.first]].offset + ref.second;
  };
  // Full rows lead, in the order of their indices in ReadoutLogits::full.
  s.out_rows.resize(full_rows_.size());
  for (const auto& [ref, index] : full_rows_) s.out_rows[index] = row_of(ref);
  s.n_full_out = int32_t(full_rows_.size());
  std::map<int32_t, int32_t> out_index;  // stream row -> index in out_rows
  for (int32_t i = 0; i < int32_t(s.out_rows.size()); ++i) out_index[s.out_rows[i]] = i;
  for (size_t m = 0; m < select_ids_.size(); ++m) {
    int32_t row = row_of(select_rows_[m]);
    auto [it, inserted] = out_index.try_emplace(row, int32_t(s.out_rows.size()));
    if (inserted) s.out_rows.push_back(row);
    s.select_out.push_back(it->second);
    s.select_ids.push_back(select_ids_[m]);
  }
  return s;
}

}  // namespace flide
