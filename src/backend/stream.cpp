// Stream invariants every backend relies on, and the ancestor paths both backends derive.
#include "backend/stream.h"

#include <algorithm>

#include "core/error.h"

namespace flide {

void validate_stream(const Stream& s) {
  const int32_t n_tokens = s.n_tokens();
  const int32_t n_nodes = int32_t(s.nodes.size());
  FLIDE_CHECK(int32_t(s.positions.size()) == n_tokens && int32_t(s.token_node.size()) == n_tokens);
  FLIDE_CHECK(!s.level_begin.empty() && s.level_begin.front() == 0 &&
              s.level_begin.back() == n_nodes);
  for (int32_t n = 0; n < n_nodes; ++n) {
    const StreamNode& node = s.nodes[n];
    FLIDE_CHECK(node.length >= 1 && node.offset >= 0 && node.offset + node.length <= n_tokens,
                "node ", n);
    FLIDE_CHECK(node.parent < n && (node.parent >= 0 || node.level == 0), "node ", n);
    FLIDE_CHECK(node.parent < 0 || node.level == s.nodes[node.parent].level + 1, "node ", n);
    FLIDE_CHECK(node.level < s.n_levels() && s.level_begin[node.level] <= n &&
                    n < s.level_begin[node.level + 1],
                "node ", n, " level ", node.level);
    FLIDE_CHECK(node.slot_in < s.n_slots && node.slot_out < s.n_slots, "node ", n);
    for (int32_t t = node.offset; t < node.offset + node.length; ++t)
      FLIDE_CHECK(s.token_node[t] == n, "row ", t, " is not in node ", n);
  }
  FLIDE_CHECK(s.pad_tokens >= 0 && s.pad_tokens <= n_tokens && s.pad_out >= 0 &&
                  s.pad_out <= int32_t(s.out_rows.size()) && s.pad_select >= 0 &&
                  s.pad_select <= int32_t(s.select_ids.size()),
              "padding");
  FLIDE_CHECK(s.node_capacity == 0 || s.node_capacity >= n_nodes, "node capacity ", s.node_capacity,
              " < ", n_nodes, " nodes");
  const int32_t real_tokens = n_tokens - s.pad_tokens;
  for (int32_t t = 0; t < real_tokens; ++t)
    FLIDE_CHECK(s.token_node[t] >= 0 && s.token_node[t] < n_nodes, "row ", t);
  for (int32_t t = real_tokens; t < n_tokens; ++t)
    FLIDE_CHECK(s.token_node[t] == -1, "padding row ", t, " belongs to node ", s.token_node[t]);
  for (int32_t n = 0; n < n_nodes; ++n)
    FLIDE_CHECK(s.nodes[n].offset + s.nodes[n].length <= real_tokens, "node ", n,
                " reaches into the padding");
  // Within a level the nodes run in parallel: no two may write one slot, and none may write a
  // slot another node of the level reads (reading and writing its own slot_in is fine).
  std::vector<int32_t> writer(size_t(std::max(s.n_slots, 0)), -1);
  for (int32_t l = 0; l < s.n_levels(); ++l) {
    for (int32_t n = s.level_begin[l]; n < s.level_begin[l + 1]; ++n) {
      const int32_t slot = s.nodes[n].slot_out;
      if (slot < 0) continue;
      FLIDE_CHECK(writer[slot] < s.level_begin[l], "slot ", slot, " written twice in level ", l);
      writer[slot] = n;
    }
    for (int32_t n = s.level_begin[l]; n < s.level_begin[l + 1]; ++n) {
      const int32_t slot = s.nodes[n].slot_in;
      FLIDE_CHECK(slot < 0 || writer[slot] < s.level_begin[l] || writer[slot] == n, "node ", n,
                  " reads slot ", slot, " that node ", writer[slot], " writes in the same level");
    }
  }
  for (int32_t r : s.out_rows) FLIDE_CHECK(r >= 0 && r < n_tokens, "out row ", r);
  FLIDE_CHECK(s.n_full_out <= int32_t(s.out_rows.size()) - s.pad_out, "full rows in padding");
  FLIDE_CHECK(s.n_full_out >= 0 && s.n_full_out <= int32_t(s.out_rows.size()));
  FLIDE_CHECK(s.select_out.size() == s.select_ids.size());
  for (int32_t m : s.select_out)
    FLIDE_CHECK(m >= 0 && m < int32_t(s.out_rows.size()), "select_out ", m);
  // Upper bounds are checked against the table by the op that reads the ids (embed,
  // select_logits); negative ids are wrong whatever the table.
  for (int32_t id : s.token_ids) FLIDE_CHECK(id >= 0, "negative token id ", id);
  for (int32_t id : s.select_ids) FLIDE_CHECK(id >= 0, "negative select id ", id);
}

void ancestor_paths(const Stream& s, std::vector<int32_t>& path_begin,
                    std::vector<int32_t>& path_nodes) {
  const int32_t n_nodes = int32_t(s.nodes.size());
  path_begin.assign(size_t(n_nodes) + 1, 0);
  path_nodes.clear();
  for (int32_t n = 0; n < n_nodes; ++n) {
    const size_t first = path_nodes.size();
    for (int32_t a = n; a >= 0; a = s.nodes[a].parent) path_nodes.push_back(a);
    std::reverse(path_nodes.begin() + std::ptrdiff_t(first), path_nodes.end());
    path_begin[n + 1] = int32_t(path_nodes.size());
  }
}

}  // namespace flide
