// Forked execution == independent execution in float64 (the exactness claim of shared-state
// forking): on random trees of depth 2 and 3 with 1-20 questions of 1-300 tokens, every
// choice probability agrees to 1e-12 and every log-likelihood to 1e-12 relative. The two
// modes share no stream layout, state slot or readout row, so agreement at float64 rounding
// level means the visibility rule, state forking and selective readout compute the function
// of independent prompts. Also: packing several requests into one round changes nothing, nor
// does submitting a round while the one before is still in flight; calibrated readouts are the
// tempered softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "common/overlapped_rounds.h"
#include "common/random_trees.h"
#include "core/error.h"
#include "engine/executor.h"

namespace flide {
namespace {

const std::filesystem::path kRoot = FLIDE_SOURCE_DIR;
using test::random_tree;

// A random tree with at least one choice readout (random_tree may draw log-likelihood readouts
// only, ~6% of small trees): the calibration tests need one, whatever the seed.
Tree random_tree_with_a_choice(std::mt19937& rng, int64_t vocab, int depth, int max_questions) {
  for (;;) {
    Tree tree = random_tree(rng, vocab, depth, max_questions);
    for (const TreeNode& node : tree.nodes)
      if (node.readout == ReadoutKind::ReadoutKind_choice) return tree;
  }
}

struct Diff {
  double prob = 0.0;    // max |p_fork - p_independent|
  double loglik = 0.0;  // max relative difference of loglik sums
};

Diff compare(const Tree& tree, const TreeResult& a, const TreeResult& b) {
  Diff d;
  for (size_t n = 0; n < tree.nodes.size(); ++n) {
    const NodeResult &x = a.nodes[n], &y = b.nodes[n];
    EXPECT_EQ(x.probs.size(), y.probs.size());
    for (size_t i = 0; i < x.probs.size() && i < y.probs.size(); ++i)
      d.prob = std::max(d.prob, std::abs(x.probs[i] - y.probs[i]));
    if (tree.nodes[n].readout == ReadoutKind::ReadoutKind_loglik) {
      double scale = std::max(1.0, std::abs(y.loglik_sum));
      d.loglik = std::max(d.loglik, std::abs(x.loglik_sum - y.loglik_sum) / scale);
    }
  }
  return d;
}

class ForkEquivalence : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::filesystem::path dir = kRoot / GetParam();
    if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << dir << " not generated yet";
    ops_ = make_cpu_ops(DType::DType_f64, 0);
    model_ = load_model(dir, *ops_);
  }
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Model> model_;
};

TEST_P(ForkEquivalence, RandomTreesDepth2And3) {
  Executor exec(*model_);
  std::mt19937 rng(std::random_device{}());
  const int64_t vocab = model_->info().vocab_size;
  Diff worst;
  for (int i = 0; i < 6; ++i) {
    const Tree tree = random_tree(rng, vocab, i % 2 == 0 ? 2 : 3, i < 2 ? 20 : 6);
    const auto forked = exec.run({tree}, ExecMode::ExecMode_fork);
    const auto independent = exec.run({tree}, ExecMode::ExecMode_independent);
    Diff d = compare(tree, forked[0], independent[0]);
    worst.prob = std::max(worst.prob, d.prob);
    worst.loglik = std::max(worst.loglik, d.loglik);
  }
  RecordProperty("max_abs_dp", std::to_string(worst.prob));
  std::printf("max |dp| = %.3e, max rel dloglik = %.3e\n", worst.prob, worst.loglik);
  EXPECT_LE(worst.prob, 1e-12);
  EXPECT_LE(worst.loglik, 1e-12);
}

TEST_P(ForkEquivalence, PackingRequestsIntoOneRoundChangesNothing) {
  Executor exec(*model_);
  std::mt19937 rng(std::random_device{}());
  const int64_t vocab = model_->info().vocab_size;
  std::vector<Tree> trees;
  for (int i = 0; i < 3; ++i) trees.push_back(random_tree(rng, vocab, 3, 4));
  const auto packed = exec.run(trees, ExecMode::ExecMode_fork);
  for (size_t t = 0; t < trees.size(); ++t) {
    const auto alone = exec.run({trees[t]}, ExecMode::ExecMode_fork);
    Diff d = compare(trees[t], packed[t], alone[0]);
    EXPECT_LE(d.prob, 1e-12);
    EXPECT_LE(d.loglik, 1e-12);
  }
}

TEST_P(ForkEquivalence, RoundsInFlightAnswerAsRoundsRunOneByOne) {
  Executor exec(*model_);
  std::mt19937 rng(std::random_device{}());
  const int64_t vocab = model_->info().vocab_size;
  std::vector<std::vector<Tree>> rounds;
  for (int r = 0; r < 4; ++r)
    rounds.push_back({random_tree(rng, vocab, 3, 4), random_tree(rng, vocab, 2, 3)});
  const auto overlapped = test::run_overlapped(exec, rounds, ExecMode::ExecMode_fork);
  ASSERT_EQ(overlapped.size(), rounds.size());
  for (size_t r = 0; r < rounds.size(); ++r) {
    const auto one_by_one = exec.run(rounds[r], ExecMode::ExecMode_fork);
    for (size_t t = 0; t < rounds[r].size(); ++t) {
      const Diff d = compare(rounds[r][t], overlapped[r][t], one_by_one[t]);
      EXPECT_LE(d.prob, 1e-12) << "round " << r << " tree " << t;
      EXPECT_LE(d.loglik, 1e-12) << "round " << r << " tree " << t;
    }
  }
  // Two rounds in flight at most, and nothing to collect without one.
  exec.submit(test::tree_ptrs(rounds[0]), ExecMode::ExecMode_fork);
  exec.submit(test::tree_ptrs(rounds[1]), ExecMode::ExecMode_fork);
  EXPECT_THROW(exec.submit(test::tree_ptrs(rounds[2]), ExecMode::ExecMode_fork), Error);
  exec.collect();
  exec.collect();
  EXPECT_THROW(exec.collect(), Error);
}

TEST_P(ForkEquivalence, ChoiceProbabilitiesAreASoftmax) {
  Executor exec(*model_);
  std::mt19937 rng(7);
  const Tree tree = random_tree(rng, model_->info().vocab_size, 2, 5);
  const auto result = exec.run({tree}, ExecMode::ExecMode_fork);
  for (size_t n = 0; n < tree.nodes.size(); ++n) {
    if (tree.nodes[n].readout != ReadoutKind::ReadoutKind_choice) continue;
    double total = 0.0;
    for (double p : result[0].nodes[n].probs) {
      EXPECT_GT(p, 0.0);
      total += p;
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
  }
}

// A calibrated readout is softmax(s / T + b) over the label logits s: recomputed here from the
// uncalibrated probabilities of the same tree, p_T ∝ p^(1/T)·e^b (log p differs from s by one
// constant a node), in both modes, which still agree to 1e-12.
TEST_P(ForkEquivalence, CalibratedReadoutsAreTheTemperedSoftmax) {
  Executor exec(*model_);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> temperature(0.3, 3.0), bias(-2.0, 2.0);
  const Tree plain = random_tree_with_a_choice(rng, model_->info().vocab_size, 2, 12);
  Tree calibrated = plain;
  for (TreeNode& node : calibrated.nodes) {
    if (node.readout != ReadoutKind::ReadoutKind_choice) continue;
    node.temperature = temperature(rng);
    if (rng() % 2 == 0)
      for (size_t i = 0; i < node.label_ids.size(); ++i) node.label_bias.push_back(bias(rng));
  }
  const auto reference = exec.run({plain}, ExecMode::ExecMode_fork);
  const auto forked = exec.run({calibrated}, ExecMode::ExecMode_fork);
  const auto independent = exec.run({calibrated}, ExecMode::ExecMode_independent);
  EXPECT_LE(compare(calibrated, forked[0], independent[0]).prob, 1e-12);
  int checked = 0;
  for (size_t n = 0; n < plain.nodes.size(); ++n) {
    const TreeNode& node = calibrated.nodes[n];
    if (node.readout != ReadoutKind::ReadoutKind_choice) continue;
    const std::vector<double>& p = reference[0].nodes[n].probs;
    std::vector<double> expected(p.size());
    double total = 0.0;
    for (size_t i = 0; i < p.size(); ++i)
      total += expected[i] = std::exp(std::log(p[i]) / node.temperature +
                                      (node.label_bias.empty() ? 0.0 : node.label_bias[i]));
    const std::vector<double>& got = forked[0].nodes[n].probs;
    ASSERT_EQ(got.size(), p.size());
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_NEAR(got[i], expected[i] / total, 1e-12) << "node " << n << " label " << i;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_P(ForkEquivalence, ACalibrationOutsideItsDomainIsRefused) {
  Executor exec(*model_);
  std::mt19937 rng(std::random_device{}());
  const Tree plain = random_tree_with_a_choice(rng, model_->info().vocab_size, 2, 3);
  const auto first_choice = [](Tree& tree) -> TreeNode& {
    return *std::find_if(tree.nodes.begin(), tree.nodes.end(), [](const TreeNode& node) {
      return node.readout == ReadoutKind::ReadoutKind_choice;
    });
  };
  const auto refused = [&](auto&& mutate, const std::string& words) {
    Tree tree = plain;
    mutate(first_choice(tree));
    try {
      exec.run({tree}, ExecMode::ExecMode_fork);
      ADD_FAILURE() << "accepted; expected an error with \"" << words << '"';
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused([](TreeNode& n) { n.temperature = 0.0; }, "temperature 0 must be finite and > 0");
  refused([](TreeNode& n) { n.temperature = -1.0; }, "must be finite and > 0");
  refused([](TreeNode& n) { n.temperature = std::nan(""); }, "must be finite and > 0");
  refused([](TreeNode& n) { n.label_bias.assign(n.label_ids.size() + 1, 0.0); },
          "label biases for");
  refused([](TreeNode& n) { n.label_bias.assign(n.label_ids.size(), INFINITY); }, "is not finite");
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, ForkEquivalence,
                         testing::Values("models/flide-tiny-random", "tests/data/golden_gqa"),
                         [](const auto& info) {
                           return std::string(info.index == 0 ? "shipped" : "golden_gqa");
                         });

}  // namespace
}  // namespace flide
