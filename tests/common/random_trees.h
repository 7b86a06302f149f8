// Random decision trees for the engine and GPU suites: a trunk of 1-300 tokens (a choice
// readout on it one time in four), 1..max_questions questions of 1-300 tokens with 2-5 distinct
// labels (a log-likelihood readout one time in five) and, at depth 3, 0-3 children per question
// of 1-40 tokens with a choice or log-likelihood readout. And trees of a fixed shape with choice
// readouts alone (the rounds that pad to a capacity bucket).
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "engine/tree.h"

namespace flide::test {

inline Tree random_tree(std::mt19937& rng, int64_t vocab, int depth, int max_questions) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto tokens = [&](int n) {
    std::vector<int32_t> ids(n);
    for (int32_t& id : ids) id = uniform(0, int(vocab) - 1);
    return ids;
  };
  auto labels = [&](int n) {
    std::vector<int32_t> ids;
    while (int(ids.size()) < n) {
      const int32_t id = uniform(0, int(vocab) - 1);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    return ids;
  };
  Tree tree;
  tree.nodes.push_back(tree_node(-1, tokens(uniform(1, 300))));
  if (uniform(0, 3) == 0) {  // a readout on the trunk itself
    tree.nodes[0].readout = ReadoutKind::ReadoutKind_choice;
    tree.nodes[0].label_ids = labels(3);
  }
  const int questions = uniform(1, max_questions);
  for (int q = 0; q < questions; ++q) {
    // Drawn in this order (the tests' seeded trees depend on it), not in argument order.
    std::vector<int32_t> ids = tokens(uniform(1, 300));
    TreeNode question =
        tree_node(0, std::move(ids), ReadoutKind::ReadoutKind_choice, labels(uniform(2, 5)));
    if (uniform(0, 4) == 0) question.readout = ReadoutKind::ReadoutKind_loglik;
    tree.nodes.push_back(question);
    const int32_t parent = int32_t(tree.nodes.size()) - 1;
    if (depth < 3) continue;
    for (int c = uniform(0, 3); c > 0; --c) {
      const bool loglik = uniform(0, 1) == 0;
      std::vector<int32_t> child_ids = tokens(uniform(1, 40));
      tree.nodes.push_back(
          tree_node(parent, std::move(child_ids),
                    loglik ? ReadoutKind::ReadoutKind_loglik : ReadoutKind::ReadoutKind_choice,
                    loglik ? std::vector<int32_t>{} : labels(uniform(2, 4))));
    }
  }
  return tree;
}

// A trunk of `trunk` tokens and `questions` questions of `length` tokens, each with 4 distinct
// labels; every token fresh.
inline Tree choice_tree(std::mt19937& rng, int64_t vocab, int trunk, int questions, int length) {
  auto id = [&] { return std::uniform_int_distribution<int32_t>(0, int32_t(vocab) - 1)(rng); };
  auto ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = id();
    return v;
  };
  Tree tree;
  tree.nodes.push_back(tree_node(-1, ids(trunk)));
  for (int q = 0; q < questions; ++q) {
    std::vector<int32_t> labels;
    while (labels.size() < 4) {
      const int32_t l = id();
      if (std::find(labels.begin(), labels.end(), l) == labels.end()) labels.push_back(l);
    }
    tree.nodes.push_back(tree_node(0, ids(length), ReadoutKind::ReadoutKind_choice, labels));
  }
  return tree;
}

}  // namespace flide::test
