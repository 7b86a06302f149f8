// Padded rounds (backend/stream.h): the rows after a round's last node belong to no node, and no
// real row's result may depend on what they hold. The attention reads keys and values past a key
// block's end (the stream rows that follow, padding included) and masks them with P = 0, which a
// NaN there would defeat (0 x NaN); so the attention and the delta rule, whose kernels skip the
// padding rows, write zeros to their outputs' padding rows, and every padding row of the
// residual stays finite. Checked on three layers of the 0.8B model's widths (attention, delta
// rule, attention: the head-256 attention and the key-128 delta rule, whose loads run past a
// block's end), in bf16 and FP8: with every byte of scratch set to 0xFF (NaN in bf16, f32 and
// e4m3) before it, a padded round gives the bits of a clean one, eager, captured and replayed
// (for another round of the bucket, with other padding), and so does an unpadded round.
// Each mixer comes before an attention, so a padding row that either left non-finite would reach
// a real row.
#include <gtest/gtest.h>

#include <random>

#include "backend/cuda/cuda_ops.h"
#include "common/random_trees.h"
#include "common/round_invariance.h"
#include "cuda_test_util.h"
#include "engine/executor.h"
#include "engine/round_capacity.h"
#include "real_widths_model.h"

namespace flide::test {
namespace {

class CudaPadding : public CudaTestWithParam<Quantization> {};

TEST_P(CudaPadding, ScratchOfNaNReachesNoAnswer) {
  auto ops = make_cuda_ops(0, false, GetParam());
  auto* cuda = dynamic_cast<CudaOps*>(ops.get());
  ASSERT_NE(cuda, nullptr);
  auto model = load_real_widths_model(R"(["full_attention", "linear_attention", "full_attention"])",
                                      *ops, 5);
  const int64_t vocab = model->info().vocab_size;
  std::mt19937 rng(std::random_device{}());
  // Two rounds of one bucket with different padding (1,255 and 1,240 rows of 1,280): the second
  // replays the first's graph, whose zeroing must find the second's padding rows on the device.
  // Their last questions end short of a key block, so the attention's reads run into the padding.
  const std::vector<std::vector<Tree>> rounds = {
      {choice_tree(rng, vocab, 700, 5, 37), choice_tree(rng, vocab, 211, 3, 53)},
      {choice_tree(rng, vocab, 700, 5, 37), choice_tree(rng, vocab, 211, 3, 48)}};
  for (const auto& trees : rounds) {
    int32_t tokens = 0;
    for (const Tree& tree : trees) tokens += int32_t(stream_tokens(tree, ExecMode::ExecMode_fork));
    ASSERT_EQ(token_bucket(tokens), 1280) << tokens << " rows";
  }

  RoundPolicy padded;
  padded.pad_to_buckets = true;
  const auto run = [&](const std::vector<Tree>& trees, bool graphs, bool pad = true) {
    EXPECT_EQ(ops->set_graphs(graphs), graphs);
    Executor exec(*model, pad ? padded : RoundPolicy{});
    return exec.run(trees, ExecMode::ExecMode_fork);
  };
  const std::vector<std::vector<TreeResult>> clean = {run(rounds[0], false), run(rounds[1], false)};
  struct Pass {
    const char* what;
    size_t round;
    bool graphs;
  };
  for (const Pass& pass : {Pass{"eager", 0, false}, Pass{"captured", 0, true},
                           Pass{"replayed for the other round", 1, true}}) {
    cuda->fill_scratch(0xFF);
    const int64_t replays = cuda->graph_stats().replayed;
    const auto poisoned = run(rounds[pass.round], pass.graphs);
    if (pass.round == 1) {
      EXPECT_EQ(cuda->graph_stats().replayed, replays + 1);
    }
    for (size_t t = 0; t < poisoned.size(); ++t)
      expect_same_bits(poisoned[t], clean[pass.round][t], cat(pass.what, ", tree ", t));
  }
  // Nor does an unpadded round read scratch that no op of it wrote.
  const auto unpadded = run(rounds[0], false, false);
  cuda->fill_scratch(0xFF);
  const auto poisoned = run(rounds[0], false, false);
  for (size_t t = 0; t < poisoned.size(); ++t)
    expect_same_bits(poisoned[t], unpadded[t], cat("unpadded, tree ", t));
}

INSTANTIATE_TEST_SUITE_P(Quantizations, CudaPadding,
                         ::testing::Values(Quantization::Quantization_none,
                                           Quantization::Quantization_fp8),
                         [](const auto& info) {
                           return info.param == Quantization::Quantization_fp8 ? "fp8" : "bf16";
                         });

}  // namespace
}  // namespace flide::test
