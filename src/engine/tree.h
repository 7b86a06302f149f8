// Decision requests as trees (DESIGN.md "Requests are trees"): node 0 is the trunk (the shared
// context), first-level children are questions, deeper children are allowed. A node may carry a
// readout: a distribution over label token ids at its last token, or the log-likelihood of its
// own tokens given its ancestors. What the model computes is defined by the token ids alone; a
// choice readout's temperature and label biases only shape its softmax afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace flide {

enum class ReadoutKind : uint8_t { ReadoutKind_none, ReadoutKind_choice, ReadoutKind_loglik };

struct TreeNode {
  int32_t parent = -1;          // index in Tree::nodes; -1 only for node 0 (the trunk)
  std::vector<int32_t> tokens;  // this node's own tokens, >= 1
  ReadoutKind readout = ReadoutKind::ReadoutKind_none;
  std::vector<int32_t> label_ids;  // choice: one token id per option, distinct
  // choice: probabilities = softmax(label logits / temperature + label_bias), the calibration
  // of decision_api.md §1.3 (engine/decision_calibration.h); label_bias empty = all 0.
  double temperature = 1.0;
  std::vector<double> label_bias;
};

// A node whose choice readout, if any, is uncalibrated (T = 1, no biases).
inline TreeNode tree_node(int32_t parent, std::vector<int32_t> tokens,
                          ReadoutKind readout = ReadoutKind::ReadoutKind_none,
                          std::vector<int32_t> label_ids = {}) {
  TreeNode node;
  node.parent = parent;
  node.tokens = std::move(tokens);
  node.readout = readout;
  node.label_ids = std::move(label_ids);
  return node;
}

struct Tree {
  std::vector<TreeNode> nodes;  // parents precede their children
};

struct NodeResult {
  std::vector<double> probs;  // choice: the calibrated softmax over the label logits, label order
  double loglik_sum = 0.0;    // loglik: sum of log p(token | ancestors, earlier tokens)
  double loglik_mean = 0.0;   // loglik: per-token mean (0 for a trunk of one token)
};

struct TreeResult {
  std::vector<NodeResult> nodes;  // aligned with Tree::nodes (empty results where no readout)
};

// Throws flide::Error naming the node and field when the tree is malformed or refers to ids
// outside [0, vocab_size).
void validate_tree(const Tree& tree, int64_t vocab_size);

// Token count of each node's root-to-node path (the node's own prompt length).
std::vector<int64_t> path_lengths(const Tree& tree);

}  // namespace flide
