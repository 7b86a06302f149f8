// The whole model on the CUDA backend (bf16 weights and activations, fp32 state, gates and
// logits) against the CPU backend in float32 (which matches HF transformers to 1e-4, see
// tests/model/golden_test.cpp), on the three committed checkpoints:
//   - logits of the golden cases (full-vocabulary rows);
//   - decision trees: choice distributions of CUDA-forked execution vs CPU-forked execution
//     (median / max total variation distance, top-1 agreement), CUDA forked vs CUDA
//     independent, log-likelihood readouts;
//   - determinism: the same round run again (after a different one) gives identical bits, so
//     do rounds in flight (each submitted before the one before is collected), and in
//     batch-invariant mode a tree alone and among others gives identical bits.
// The figures are printed at the end of the run for the record; the assertions are loose
// bounds that any real bug (a wrong op, a missed state slot, a visibility leak) breaks by far.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "common/golden_cases.h"
#include "common/overlapped_rounds.h"
#include "common/random_trees.h"
#include "common/round_invariance.h"
#include "cuda_test_util.h"
#include "engine/executor.h"

namespace flide::test {
namespace {

const std::filesystem::path kRoot = FLIDE_SOURCE_DIR;

// The q-quantile (nearest rank) of v; 0 for an empty v.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(std::ceil(q * double(v.size())));
  return v[std::min(v.size() - 1, rank > 0 ? rank - 1 : 0)];
}

std::string name_of(const char* dir) {
  return std::filesystem::path(dir).filename().string();
}

class CudaModel : public CudaTestWithParam<const char*> {
 protected:
  void SetUp() override {
    FLIDE_SKIP_WITHOUT_CUDA();
    dir_ = kRoot / GetParam();
    if (!std::filesystem::exists(dir_ / "config.json")) GTEST_SKIP() << dir_ << " is missing";
    cpu_ops_ = make_cpu_ops(DType::DType_f32, 0);
    gpu_ops_ = make_cuda_ops(0);
    cpu_ = load_model(dir_, *cpu_ops_);
    gpu_ = load_model(dir_, *gpu_ops_);
  }
  std::filesystem::path dir_;
  std::unique_ptr<Ops> cpu_ops_, gpu_ops_;
  std::unique_ptr<Model> cpu_, gpu_;
};

// How far HF transformers' own bf16 forward lands from its float32 goldens on these inputs, by
// max |dlogit| / max |logit| (tools/golden/hf_bf16_error.py on the H200, 2026-11-29). These
// random 4-8 layer fixtures amplify bf16 rounding strongly (the tied one by 40%), so a fixed
// bound would be either meaningless or unreachable; ours must stay within twice the reference
// implementation's own bf16 error. A wrong op, state or readout row breaks that by far.
double hf_bf16_error(const std::string& name) {
  if (name == "flide-tiny-random") return 0.0961;
  if (name == "golden_gqa") return 0.0777;
  if (name == "golden_tied_sharded") return 0.4297;
  return 0.05;
}

TEST_P(CudaModel, GoldenCasesMatchCpuF32) {
  if (!std::filesystem::exists(dir_ / "golden.json")) GTEST_SKIP() << "no golden.json";
  const int64_t V = gpu_->info().vocab_size;
  double worst = 0;
  const double bound = 2 * hf_bf16_error(name_of(GetParam()));
  for (const GoldenCase& g : read_golden(dir_ / "golden.json")) {
    const Stream s = single_sequence(g);
    const ReadoutLogits want = cpu_->forward(s), got = gpu_->forward(s);
    ASSERT_EQ(got.full.size(), g.rows.size() * size_t(V));
    ASSERT_EQ(want.full.size(), got.full.size());
    for (size_t r = 0; r < g.rows.size(); ++r) {
      double scale = 0, err = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double a = got.full[r * V + v], b = want.full[r * V + v];
        ASSERT_FALSE(std::isnan(a)) << "NaN logit, length " << g.ids.size() << " row " << g.rows[r];
        scale = std::max(scale, std::abs(b));
        err = std::max(err, std::abs(a - b));
      }
      worst = std::max(worst, err / scale);
      EXPECT_LE(err / scale, bound) << "length " << g.ids.size() << " row " << g.rows[r];
    }
  }
  CudaReport::lines().push_back(
      cat(name_of(GetParam()), " golden cases: max |logit CUDA - CPU f32| / max |logit| = ", worst,
          " (bound ", bound, " = 2 x HF's own bf16 error)"));
}

std::string margins_text(const std::vector<double>& m) {
  std::string out;
  for (double x : m) {
    if (!out.empty()) out += ' ';
    out += std::to_string(x);
  }
  return out.empty() ? "none" : out;
}

// Choice distributions over 2-5 labels and log-likelihood readouts, CUDA (forked and
// independent) against the CPU in float32. Both CUDA modes differ from float32 by bf16 rounding
// only, in different orders (GDN chunk boundaries, GEMM shapes, attention tiles), and these
// random fixtures amplify bf16 rounding as much as HF's own bf16 path does (hf_bf16_error): on
// some draws of trees a choice near a tie moves by TVD 0.5-0.6 and a log-likelihood by 0.7
// nats/token in either mode. So the forked path is held to the independent path's error on the
// same trees rather than to fixed bounds: a wrong readout row, state slot or visibility makes
// the forked errors many times the independent ones (another question's readout is TVD ~0.3-0.6
// away on most choices). Over 25 draws of trees on an H100 (FLIDE_TEST_SEED 1-24 and the
// default; 2026-12-07), the forked worst TVD stayed within 2.1x the independent worst and the
// medians within 2.6x; the bounds below leave room over that.
TEST_P(CudaModel, DecisionTreesMatchCpuF32) {
  Executor cpu_exec(*cpu_), gpu_exec(*gpu_);
  const int64_t vocab = gpu_->info().vocab_size;
  // FLIDE_TEST_SEED draws other trees.
  const char* seed_env = std::getenv("FLIDE_TEST_SEED");
  std::mt19937 rng{uint32_t(std::hash<std::string>{}(GetParam())) ^
                   (seed_env ? uint32_t(std::strtoul(seed_env, nullptr, 10)) : 0u)};
  std::vector<double> tvd_cpu, tvd_indep_cpu, tvd_indep, dloglik_cpu, dloglik_indep_cpu;
  int n_choice = 0, top1_same = 0, top1_indep_same = 0;
  std::vector<double> flip_margins;  // the reference's p1 - p2 where fork's top-1 differs
  for (int i = 0; i < 6; ++i) {
    const Tree tree = random_tree(rng, vocab, i % 2 == 0 ? 2 : 3, i < 2 ? 12 : 6);
    const TreeResult ref = cpu_exec.run({tree}, ExecMode::ExecMode_fork)[0];
    const TreeResult fork = gpu_exec.run({tree}, ExecMode::ExecMode_fork)[0];
    const TreeResult indep = gpu_exec.run({tree}, ExecMode::ExecMode_independent)[0];
    for (size_t n = 0; n < tree.nodes.size(); ++n) {
      const NodeResult &r = ref.nodes[n], &f = fork.nodes[n], &d = indep.nodes[n];
      if (tree.nodes[n].readout == ReadoutKind::ReadoutKind_choice) {
        ASSERT_EQ(f.probs.size(), r.probs.size());
        for (double x : f.probs) ASSERT_FALSE(std::isnan(x)) << "tree " << i << " node " << n;
        tvd_cpu.push_back(tvd(f.probs, r.probs));
        tvd_indep_cpu.push_back(tvd(d.probs, r.probs));
        tvd_indep.push_back(tvd(f.probs, d.probs));
        ++n_choice;
        top1_same += argmax(f.probs) == argmax(r.probs);
        top1_indep_same += argmax(d.probs) == argmax(r.probs);
        if (argmax(f.probs) != argmax(r.probs)) {
          std::vector<double> sorted = r.probs;
          std::sort(sorted.rbegin(), sorted.rend());
          flip_margins.push_back(sorted[0] - sorted[1]);
        }
      } else if (tree.nodes[n].readout == ReadoutKind::ReadoutKind_loglik) {
        ASSERT_FALSE(std::isnan(f.loglik_mean)) << "tree " << i << " node " << n;
        dloglik_cpu.push_back(std::abs(f.loglik_mean - r.loglik_mean));
        dloglik_indep_cpu.push_back(std::abs(d.loglik_mean - r.loglik_mean));
      }
    }
  }
  ASSERT_GT(n_choice, 0);
  const double top1 = double(top1_same) / n_choice;
  const std::string name = name_of(GetParam());
  CudaReport::lines().push_back(
      cat(name, " trees (", n_choice, " choices): TVD CUDA-fork vs CPU-f32 median ",
          quantile(tvd_cpu, 0.5), " max ", quantile(tvd_cpu, 1.0), " (CUDA-independent median ",
          quantile(tvd_indep_cpu, 0.5), " max ", quantile(tvd_indep_cpu, 1.0),
          "); top-1 agreement ", top1, " (independent ", double(top1_indep_same) / n_choice,
          "; reference margins of the flips ", margins_text(flip_margins),
          "); TVD CUDA fork vs independent median ", quantile(tvd_indep, 0.5), " max ",
          quantile(tvd_indep, 1.0), "; |d mean loglik| vs CPU (nats/token) median ",
          quantile(dloglik_cpu, 0.5), " max ", quantile(dloglik_cpu, 1.0), " (independent median ",
          quantile(dloglik_indep_cpu, 0.5), " max ", quantile(dloglik_indep_cpu, 1.0), ")"));
  // The forked path's errors within a small multiple of the independent path's, plus a floor
  // for the draws where the independent path happens to land very close.
  EXPECT_LT(quantile(tvd_cpu, 0.5), 3 * quantile(tvd_indep_cpu, 0.5) + 0.01);
  EXPECT_LT(quantile(tvd_cpu, 1.0), 3 * quantile(tvd_indep_cpu, 1.0) + 0.05);
  EXPECT_LT(quantile(dloglik_cpu, 0.5), 3 * quantile(dloglik_indep_cpu, 0.5) + 0.02);
  // A single log-likelihood readout is heavy-tailed: over the 25 draws the worst was 0.71
  // nats/token independent and, once, 2.02 forked (the tied fixture, whose bf16 logits are 43%
  // off; that draw's forked median was 0.016). So the worst one only guards against a blow-up;
  // a wrong target or row shows in the median above.
  EXPECT_LT(quantile(dloglik_cpu, 1.0), 3.0);
  // Top-1 against float32: both modes flip choices whose reference margin is small (up to
  // ~0.25 on these fixtures; agreement at least 0.84 over the 25 draws), the forked one at most
  // 2 more than the independent one; a readout or row mix-up (agreement near 1 / labels,
  // 0.2-0.5) stays far below 0.75.
  EXPECT_GE(top1, 0.75);
  EXPECT_GE(top1_same, top1_indep_same - std::max(2, n_choice / 10));
  // And absolute bounds a wrong op in both modes alike breaks (over the 25 draws the forked
  // median TVD was at most 0.041, and fork vs independent at most 0.031).
  EXPECT_LT(quantile(tvd_cpu, 0.5), 0.1);
  EXPECT_LT(quantile(tvd_indep, 0.5), 0.06);
}

// No atomics-order or uninitialised-memory dependence: a round repeated after a different round
// (other sizes, other slots, the scratch arena merged in between) gives the same bits.
TEST_P(CudaModel, SameRoundTwiceGivesIdenticalBits) {
  Executor exec(*gpu_);
  const int64_t vocab = gpu_->info().vocab_size;
  std::mt19937 rng(11);
  const std::vector<Tree> a = {random_tree(rng, vocab, 3, 6), random_tree(rng, vocab, 2, 4)};
  const std::vector<Tree> b = {random_tree(rng, vocab, 3, 12)};
  const auto first = exec.run(a, ExecMode::ExecMode_fork);
  exec.run(b, ExecMode::ExecMode_fork);
  const auto second = exec.run(a, ExecMode::ExecMode_fork);
  for (size_t t = 0; t < a.size(); ++t) expect_same_bits(second[t], first[t], cat("tree ", t));
}

// Rounds in flight as the engine loop runs them, with log-likelihood readouts (a second
// readback a round): the bits of the same rounds run one by one.
TEST_P(CudaModel, RoundsInFlightGiveTheBitsOfRoundsRunOneByOne) {
  Executor exec(*gpu_);
  const int64_t vocab = gpu_->info().vocab_size;
  std::mt19937 rng(std::random_device{}());
  std::vector<std::vector<Tree>> rounds;
  for (int r = 0; r < 5; ++r)
    rounds.push_back({random_tree(rng, vocab, 3, 8), random_tree(rng, vocab, 2, 3 + r)});
  const auto overlapped = run_overlapped(exec, rounds, ExecMode::ExecMode_fork);
  for (size_t r = 0; r < rounds.size(); ++r) {
    const auto one_by_one = exec.run(rounds[r], ExecMode::ExecMode_fork);
    for (size_t t = 0; t < rounds[r].size(); ++t)
      expect_same_bits(overlapped[r][t], one_by_one[t], cat("round ", r, " tree ", t));
  }
}

// Batch-invariant mode (make_cuda_ops): a tree's answers are the same bits whether it runs alone
// or among other requests, as a loaded server packs them. Without the mode, cuBLASLt's choice
// of GEMM algorithm by row count makes the last bits depend on the round.
TEST_P(CudaModel, BatchInvariantTreeIgnoresItsRound) {
  const std::unique_ptr<Ops> ops = make_cuda_ops(0, /*batch_invariant=*/true);
  const std::unique_ptr<Model> model = load_model(dir_, *ops);
  Executor exec(*model);
  std::mt19937 rng(29);
  const AloneAndAmong r = run_alone_and_among(exec, rng, model->info().vocab_size);
  for (size_t n = 0; n < r.tree.nodes.size(); ++n)
    for (double p : r.alone.nodes[n].probs) ASSERT_FALSE(std::isnan(p)) << "node " << n;
  expect_same_bits(r);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CudaModel,
                         ::testing::Values("models/flide-tiny-random", "tests/data/golden_gqa",
                                           "tests/data/golden_tied_sharded"),
                         [](const auto& info) {
                           std::string name = name_of(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace flide::test
