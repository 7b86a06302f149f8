// Capacity buckets, tail padding and round packing (engine/round_capacity.h): the ladder's
// bounds, padded streams that still validate and keep the round's content first, packing that
// splits only at tree boundaries — and, in float64 on the CPU backend, padded and packed rounds
// answering what one unpadded round answers (1e-12: padding rows never reach a real row, so
// only the GEMMs' blocking over a different row count can move the last bits).
#include "engine/round_capacity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "common/random_trees.h"
#include "engine/executor.h"
#include "engine/stream_assembler.h"

namespace flide {
namespace {

const std::filesystem::path kRoot = FLIDE_SOURCE_DIR;

// Graph-captured rounds carry choice readouts only: log-likelihood nodes become choices.
Tree choice_only(Tree tree, std::mt19937& rng, int64_t vocab) {
  for (TreeNode& node : tree.nodes) {
    if (node.readout != ReadoutKind::ReadoutKind_loglik) continue;
    node.readout = ReadoutKind::ReadoutKind_choice;
    node.label_ids.clear();
    while (node.label_ids.size() < 3) {
      const int32_t id = std::uniform_int_distribution<int32_t>(0, int32_t(vocab) - 1)(rng);
      if (std::find(node.label_ids.begin(), node.label_ids.end(), id) == node.label_ids.end())
        node.label_ids.push_back(id);
    }
  }
  return tree;
}

Stream forked_stream(const Tree& tree) {
  StreamAssembler sa;
  std::vector<int32_t> seg(tree.nodes.size());
  for (size_t n = 0; n < tree.nodes.size(); ++n) {
    const TreeNode& node = tree.nodes[n];
    seg[n] = sa.add_node(node.parent < 0 ? -1 : seg[size_t(node.parent)], node.tokens);
    if (node.readout == ReadoutKind::ReadoutKind_choice)
      sa.read_selected(seg[n], int32_t(node.tokens.size()) - 1, node.label_ids);
  }
  return sa.finish();
}

TEST(TokenBucket, CoversEveryCountWithAtMostASixteenthOfPadding) {
  int32_t previous = 0;
  for (int32_t t = 1; t <= 70000; ++t) {
    const int32_t b = token_bucket(t);
    ASSERT_GE(b, t);
    ASSERT_GE(b, previous) << t;  // monotone
    ASSERT_LE(b, std::max(64, t + t / 16 + 1)) << t;
    previous = b;
  }
  EXPECT_EQ(token_bucket(1), 64);
  EXPECT_EQ(token_bucket(650), 672);    // race_all: step 32 between 512 and 1024
  EXPECT_EQ(token_bucket(6260), 6400);  // quality_all: step 256 between 4096 and 8192
}

TEST(PadStream, KeepsTheRoundFirstAndStillValidates) {
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 20; ++i) {
    const Tree tree = choice_only(test::random_tree(rng, 1000, 2 + i % 2, 8), rng, 1000);
    const Stream s = forked_stream(tree);
    const auto cap = capacity_for(s, 1 << 20);
    ASSERT_TRUE(cap.has_value());
    const Stream p = pad_stream(s, *cap);
    validate_stream(p);
    EXPECT_TRUE(p.padded());
    EXPECT_EQ(p.n_tokens(), cap->tokens);
    EXPECT_EQ(p.pad_tokens, cap->tokens - s.n_tokens());
    EXPECT_EQ(int32_t(p.out_rows.size()), cap->out_rows);
    EXPECT_EQ(int32_t(p.select_ids.size()), cap->selects);
    EXPECT_GE(p.node_capacity, int32_t(s.nodes.size()));
    EXPECT_TRUE(std::equal(s.token_ids.begin(), s.token_ids.end(), p.token_ids.begin()));
    EXPECT_TRUE(std::equal(s.out_rows.begin(), s.out_rows.end(), p.out_rows.begin()));
    EXPECT_TRUE(std::equal(s.select_ids.begin(), s.select_ids.end(), p.select_ids.begin()));
    EXPECT_EQ(p.level_begin, s.level_begin);
    for (int32_t t = s.n_tokens(); t < p.n_tokens(); ++t) EXPECT_EQ(p.token_node[t], -1);
    EXPECT_FALSE(capacity_for(p, 1 << 20).has_value()) << "padded twice";
  }
}

TEST(PadStream, FullVocabularyAndOversizedRoundsHaveNoBucket) {
  Tree tree;
  tree.nodes.push_back(tree_node(-1, std::vector<int32_t>(300, 5)));
  tree.nodes.push_back(tree_node(0, {1, 2, 3}, ReadoutKind::ReadoutKind_choice, {7, 8}));
  EXPECT_TRUE(capacity_for(forked_stream(tree), 512).has_value());
  EXPECT_FALSE(capacity_for(forked_stream(tree), 256).has_value());  // over the largest bucket
  StreamAssembler sa;
  const int32_t root = sa.add_node(-1, {1, 2, 3});
  sa.read_full(root, 1);
  EXPECT_FALSE(capacity_for(sa.finish(), 512).has_value());
}

TEST(PackRounds, SplitsOnlyBetweenItemsAndKeepsTheirOrder) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> tokens(std::uniform_int_distribution<int>(0, 30)(rng));
    for (int64_t& t : tokens) t = std::uniform_int_distribution<int>(1, 900)(rng);
    const int64_t max_tokens = std::uniform_int_distribution<int>(100, 2000)(rng);
    const auto rounds = pack_rounds(tokens, max_tokens);
    int32_t next = 0;
    for (const auto& round : rounds) {
      ASSERT_FALSE(round.empty());
      int64_t used = 0;
      for (int32_t i : round) {
        EXPECT_EQ(i, next++);
        used += tokens[size_t(i)];
      }
      EXPECT_TRUE(used <= max_tokens || round.size() == 1) << "an oversized item shares a round";
    }
    EXPECT_EQ(next, int32_t(tokens.size()));
    for (size_t r = 0; r + 1 < rounds.size(); ++r) {  // greedy: the next item did not fit
      int64_t used = 0;
      for (int32_t i : rounds[r]) used += tokens[size_t(i)];
      EXPECT_GT(used + tokens[size_t(rounds[r + 1].front())], max_tokens);
    }
  }
}

TEST(PaddedRounds, AnswerWhatOneUnpaddedRoundAnswersInFloat64) {
  const std::filesystem::path dir = kRoot / "models/flide-tiny-random";
  auto ops = make_cpu_ops(DType::DType_f64, 0);
  auto model = load_model(dir, *ops);
  const int64_t vocab = model->info().vocab_size;
  std::mt19937 rng(std::random_device{}());
  std::vector<Tree> trees;
  for (int i = 0; i < 5; ++i)
    trees.push_back(choice_only(test::random_tree(rng, vocab, 2 + i % 2, 6), rng, vocab));

  Executor plain(*model);
  RoundPolicy policy;
  policy.max_round_tokens = 1200;
  policy.pad_to_buckets = true;
  Executor padded(*model, policy);
  for (ExecMode mode : {ExecMode::ExecMode_fork, ExecMode::ExecMode_independent}) {
    RunStats stats;
    const auto want = plain.run(trees, mode);
    const auto got = padded.run(trees, mode, &stats);
    EXPECT_GT(stats.tokens_padding, 0);
    double worst = 0.0;
    for (size_t t = 0; t < trees.size(); ++t)
      for (size_t n = 0; n < trees[t].nodes.size(); ++n) {
        ASSERT_EQ(got[t].nodes[n].probs.size(), want[t].nodes[n].probs.size());
        for (size_t i = 0; i < want[t].nodes[n].probs.size(); ++i)
          worst = std::max(worst, std::abs(got[t].nodes[n].probs[i] - want[t].nodes[n].probs[i]));
      }
    std::printf("mode %d: %lld rounds, %lld padding rows, max |dp| %.3e\n", int(mode),
                (long long)stats.rounds, (long long)stats.tokens_padding, worst);
    EXPECT_LE(worst, 1e-12);
  }
}

}  // namespace
}  // namespace flide
