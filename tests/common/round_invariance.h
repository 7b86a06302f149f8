// Batch invariance of a whole model: a random tree run alone, then first in one round with 11
// other random trees, forked. Both backends' suites require the two answers bit for bit in
// batch-invariant mode (expect_same_bits, which other bitwise comparisons of results use too).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/random_trees.h"
#include "engine/executor.h"

namespace flide::test {

struct AloneAndAmong {
  Tree tree;
  TreeResult alone, among;
};

inline AloneAndAmong run_alone_and_among(Executor& exec, std::mt19937& rng, int64_t vocab) {
  AloneAndAmong r{random_tree(rng, vocab, 3, 12), {}, {}};
  std::vector<Tree> round = {r.tree};
  for (int i = 0; i < 11; ++i) round.push_back(random_tree(rng, vocab, 1 + i % 3, 4 + i));
  r.alone = exec.run({r.tree}, ExecMode::ExecMode_fork)[0];
  r.among = exec.run(round, ExecMode::ExecMode_fork)[0];
  return r;
}

// Every node's probabilities and log-likelihood, bit for bit (both results of one tree); `what`
// names the tree in messages.
inline void expect_same_bits(const TreeResult& got, const TreeResult& want,
                             const std::string& what = "") {
  for (size_t n = 0; n < got.nodes.size(); ++n) {
    EXPECT_EQ(got.nodes[n].probs, want.nodes[n].probs) << what << " node " << n;
    EXPECT_EQ(got.nodes[n].loglik_sum, want.nodes[n].loglik_sum) << what << " node " << n;
  }
}

inline void expect_same_bits(const AloneAndAmong& r) {
  expect_same_bits(r.among, r.alone);
}

}  // namespace flide::test
