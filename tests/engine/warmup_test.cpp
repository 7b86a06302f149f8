// The serving warm-up (engine/warmup.h) on the CPU backend:
//   - its synthetic requests are valid trees of the rows asked for, in both modes, whose every
//     question fits the context limit, and the same on every call;
//   - a warm-up reports the rows it ran and leaves the model computing what it computed before.
// tests/cuda/graph_test.cpp checks the second on the GPU, where the warm-up grows arenas, fills
// plan caches and captures a graph.
#include "engine/warmup.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "common/random_trees.h"
#include "common/round_invariance.h"

namespace flide {
namespace {

const std::filesystem::path kRoot = FLIDE_SOURCE_DIR;

int64_t rows_of(const std::vector<Tree>& trees, ExecMode mode) {
  int64_t rows = 0;
  for (const Tree& tree : trees) rows += stream_tokens(tree, mode);
  return rows;
}

TEST(WarmupTrees, FillTheRowsAskedForWithinTheContextLimit) {
  for (ExecMode mode : {ExecMode::ExecMode_fork, ExecMode::ExecMode_independent})
    for (int64_t max_context : {int64_t(0), int64_t(2), int64_t(10), int64_t(300), int64_t(262144)})
      for (int64_t rows : {1, 7, 33, 600, 4608, 4609, 65536, 100003}) {
        SCOPED_TRACE(testing::Message() << "mode " << int(mode) << ", max_context " << max_context
                                        << ", rows " << rows);
        const WarmupShape shape{rows, max_context, 1984};
        const std::vector<Tree> trees = warmup_trees(shape, mode, rows);
        ASSERT_FALSE(trees.empty());
        int64_t choices = 0;
        for (const Tree& tree : trees) {
          validate_tree(tree, shape.vocab_size);
          const int64_t limit = max_context > 0 ? max_context : 4096 + 32;
          for (int64_t length : path_lengths(tree)) EXPECT_LE(length, limit);
          for (const TreeNode& node : tree.nodes)
            choices += node.readout == ReadoutKind::ReadoutKind_choice;
        }
        EXPECT_GT(choices, 0);
        // Rows that are fewer than a trunk token and one question get that (a request larger
        // than the round runs alone, too); others are filled to within 10% or 16 rows.
        const int64_t question = max_context > 0 ? std::min<int64_t>(32, max_context / 2) : 32;
        const int64_t got = rows_of(trees, mode);
        if (rows <= 1 + question) {
          EXPECT_EQ(got, 1 + question);
        } else {
          EXPECT_LE(got, rows);
          EXPECT_GE(got, rows - std::max<int64_t>(rows / 10, 16));
        }
        EXPECT_EQ(rows_of(warmup_trees(shape, mode, rows), mode), got);
        EXPECT_EQ(warmup_trees(shape, mode, rows)[0].nodes[0].tokens, trees[0].nodes[0].tokens);
      }
}

TEST(WarmUp, ReportsItsRowsAndLeavesTheAnswersAsTheyWere) {
  const std::unique_ptr<Ops> ops = make_cpu_ops(DType::DType_f32, 0);
  const std::unique_ptr<Model> model = load_model(kRoot / "models/flide-tiny-random", *ops);
  const int64_t vocab = model->info().vocab_size;
  std::mt19937 rng(std::random_device{}());
  std::vector<Tree> requests;
  for (int r = 0; r < 4; ++r) requests.push_back(test::random_tree(rng, vocab, 3, 6));
  Executor exec(*model);
  const std::vector<TreeResult> before = exec.run(requests, ExecMode::ExecMode_fork);

  const WarmupReport report =
      warm_up(*model, RoundPolicy{}, ExecMode::ExecMode_fork, WarmupShape{700, 0, vocab});
  EXPECT_GT(report.full_round_rows, 600);
  EXPECT_LE(report.full_round_rows, 700);
  EXPECT_GT(report.small_round_rows, 256);
  EXPECT_GE(report.seconds, 0.0);

  const std::vector<TreeResult> after = exec.run(requests, ExecMode::ExecMode_fork);
  ASSERT_EQ(after.size(), before.size());
  for (size_t t = 0; t < before.size(); ++t)
    test::expect_same_bits(after[t], before[t], testing::PrintToString(t));
}

}  // namespace
}  // namespace flide
