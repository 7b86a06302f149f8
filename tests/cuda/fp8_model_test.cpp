// --quantization fp8 on a whole model: two layers of the 0.8B model's widths (a Gated DeltaNet
// layer, then a gated-attention layer: hidden 1,024, MLP 3,584, 16 key heads of 128, 8 query
// heads of 256) with a 4,096-token vocabulary and random weights, so that every FP8 path runs
// (the norms that write the FP8 form, the four products, the last layer's products from
// gathered rows). Checked:
//   - graph replays give the eager rounds' bits (the norms' FP8 buffer is captured like the
//     rest);
//   - forked questions are as near bf16's answers as independent ones are (within a small
//     multiple, as CudaModel holds fork to independent): the two modes round in different
//     orders (GDN chunk boundaries, GEMM shapes), and a bf16 bit that differs moves an e4m3
//     rounding step, so their median TVD from each other is of FP8's own order (0.004-0.012 over
//     35 draws of trees on H100s, 7 of them over 0.01), where a wrong row, slot or visibility
//     moves it by 0.3+. Over 30 of those draws the forked answers' TVD from bf16 was 0.76-1.26x
//     the independent ones';
//   - FP8 against bf16: the operands' 3-bit mantissas move the distributions (median TVD ~0.01
//     for these two layers), and a broken path would move them by their own order (0.3+).
#include <gtest/gtest.h>

#include <random>

#include "common/random_trees.h"
#include "cuda_test_util.h"
#include "engine/executor.h"
#include "model/model.h"
#include "real_widths_model.h"

namespace flide::test {
namespace {

// Choice distributions of every tree's choice readouts, in order.
std::vector<std::vector<double>> choices(const std::vector<Tree>& trees,
                                         const std::vector<TreeResult>& results) {
  std::vector<std::vector<double>> out;
  for (size_t t = 0; t < trees.size(); ++t)
    for (size_t n = 0; n < trees[t].nodes.size(); ++n)
      if (trees[t].nodes[n].readout == ReadoutKind::ReadoutKind_choice)
        out.push_back(results[t].nodes[n].probs);
  return out;
}

double median_tvd(const std::vector<std::vector<double>>& a,
                  const std::vector<std::vector<double>>& b) {
  std::vector<double> d;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d.push_back(tvd(a[i], b[i]));
  if (d.empty()) return 0.0;
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return d[d.size() / 2];
}

TEST(CudaFp8Model, GraphsKeepTheBitsForkAgreesAndBf16IsNear) {
  FLIDE_SKIP_WITHOUT_CUDA();
  auto ops8 = make_cuda_ops(0, false, Quantization::Quantization_fp8);
  auto ops16 = make_cuda_ops(0);
  const char* layers = R"(["linear_attention", "full_attention"])";
  auto model8 = load_real_widths_model(layers, *ops8, 11);
  auto model16 = load_real_widths_model(layers, *ops16, 11);

  std::mt19937 rng(std::random_device{}());
  std::vector<Tree> trees;
  for (int i = 0; i < 4; ++i) trees.push_back(random_tree(rng, 4096, 2 + i % 2, 8));
  RoundPolicy padded;
  padded.pad_to_buckets = true;
  const auto run = [&](Model& model, Ops& ops, bool graphs, ExecMode mode) {
    EXPECT_EQ(ops.set_graphs(graphs), graphs);
    Executor exec(model, padded);
    return exec.run(trees, mode);
  };
  const auto eager = run(*model8, *ops8, false, ExecMode::ExecMode_fork);
  for (int pass = 0; pass < 2; ++pass) {  // captured, then replayed
    const auto graphed = run(*model8, *ops8, true, ExecMode::ExecMode_fork);
    for (size_t t = 0; t < trees.size(); ++t)
      for (size_t n = 0; n < trees[t].nodes.size(); ++n)
        EXPECT_EQ(graphed[t].nodes[n].probs, eager[t].nodes[n].probs)
            << "pass " << pass << " tree " << t << " node " << n;
  }
  const auto fork = choices(trees, eager);
  const auto indep = choices(trees, run(*model8, *ops8, false, ExecMode::ExecMode_independent));
  const auto bf16 = choices(trees, run(*model16, *ops16, false, ExecMode::ExecMode_fork));
  ASSERT_FALSE(fork.empty());
  for (const auto& p : fork)
    for (double x : p) ASSERT_TRUE(std::isfinite(x));
  const double fork_indep = median_tvd(fork, indep), fp8_bf16 = median_tvd(fork, bf16),
               indep_bf16 = median_tvd(indep, bf16);
  int top1 = 0;
  for (size_t i = 0; i < fork.size(); ++i) top1 += argmax(fork[i]) == argmax(bf16[i]);
  EXPECT_LT(fp8_bf16, 3 * indep_bf16 + 0.01);
  EXPECT_LE(fp8_bf16, 0.1);
  CudaReport::lines().push_back(cat("fp8 model (2 layers of 0.8B widths): ", fork.size(),
                                    " choices, median TVD fork vs independent ", fork_indep,
                                    ", fp8 vs bf16 ", fp8_bf16, " (independent ", indep_bf16,
                                    "), top-1 same as bf16 ", top1, " of ", fork.size()));
}

}  // namespace
}  // namespace flide::test
