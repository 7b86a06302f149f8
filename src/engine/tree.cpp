// Tree validation and path lengths.
#include "engine/tree.h"

#include <cmath>
#include <unordered_set>

#include "core/error.h"

namespace flide {

void validate_tree(const Tree& tree, int64_t vocab_size) {
  if (tree.nodes.empty()) throw Error("a tree needs at least its trunk");
  for (size_t n = 0; n < tree.nodes.size(); ++n) {
    const TreeNode& node = tree.nodes[n];
    const std::string where = n == 0 ? "trunk" : cat("node ", n);
    if (n == 0 && node.parent != -1) throw Error("trunk: parent must be -1");
    if (n > 0 && (node.parent < 0 || size_t(node.parent) >= n))
      throw Error(cat(where, ": parent ", node.parent, " must be an earlier node"));
    if (node.tokens.empty()) throw Error(cat(where, ": no tokens"));
    for (int32_t id : node.tokens)
      if (id < 0 || id >= vocab_size)
        throw Error(cat(where, ": token id ", id, " outside the vocabulary [0, ", vocab_size, ")"));
    if (node.readout == ReadoutKind::ReadoutKind_choice) {
      if (node.label_ids.empty()) throw Error(cat(where, ": a choice readout needs label ids"));
      std::unordered_set<int32_t> seen;
      for (int32_t id : node.label_ids) {
        if (id < 0 || id >= vocab_size)
          throw Error(
              cat(where, ": label id ", id, " outside the vocabulary [0, ", vocab_size, ")"));
        if (!seen.insert(id).second) throw Error(cat(where, ": label id ", id, " repeated"));
      }
      if (!(node.temperature > 0.0) || !std::isfinite(node.temperature))
        throw Error(cat(where, ": temperature ", node.temperature, " must be finite and > 0"));
      if (!node.label_bias.empty() && node.label_bias.size() != node.label_ids.size())
        throw Error(cat(where, ": ", node.label_bias.size(), " label biases for ",
                        node.label_ids.size(), " labels"));
      for (double bias : node.label_bias)
        if (!std::isfinite(bias)) throw Error(cat(where, ": label bias ", bias, " is not finite"));
    }
  }
}

std::vector<int64_t> path_lengths(const Tree& tree) {
  std::vector<int64_t> length(tree.nodes.size());
  for (size_t n = 0; n < tree.nodes.size(); ++n) {
    const TreeNode& node = tree.nodes[n];
    length[n] = int64_t(node.tokens.size()) + (node.parent < 0 ? 0 : length[node.parent]);
  }
  return length;
}

}  // namespace flide
