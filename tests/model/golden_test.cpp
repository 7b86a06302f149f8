// Model logits against golden outputs of Hugging Face transformers (float32, CPU, torch
// fallback kernels), made by tools/golden/make_fixtures.py from random-weight checkpoints of
// the real layout: grouped value heads with Dk != Dv in bf16 (golden_gqa), tied embeddings with
// sharded mixed-dtype safetensors in the multimodal layout (golden_tied_sharded), and the
// shipped demo model.
//
// Tolerance: max |logit - golden| <= 1e-4 * max |golden| per row. Both sides compute in float32
// from identical (bf16-exact) weights; they differ only in summation order (OpenBLAS vs MKL/ATen
// GEMM blocking, HF's chunked delta rule with padding vs ours), which over <= 8 layers of
// width <= 64 perturbs logits by ~1e-6 relative. 1e-4 leaves room for that while any wrong
// formula (norm offset, gate split, head grouping, RoPE pairing) moves logits by > 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/checkpoint_param.h"
#include "common/golden_cases.h"
#include "model/model.h"

namespace flide {
namespace {

using test::CheckpointParam;
using test::GoldenCase;
using test::read_golden;
using test::single_sequence;

const std::filesystem::path kRoot = FLIDE_SOURCE_DIR;

class Golden : public testing::TestWithParam<CheckpointParam> {};

TEST_P(Golden, LogitsMatchTransformers) {
  const std::filesystem::path dir = kRoot / GetParam().dir;
  if (!std::filesystem::exists(dir / "golden.json")) GTEST_SKIP() << dir << " has no golden.json";
  auto ops = make_cpu_ops(GetParam().dtype, 0);
  auto model = load_model(dir, *ops);
  const int64_t V = model->info().vocab_size;
  double worst = 0.0;
  for (const GoldenCase& g : read_golden(dir / "golden.json")) {
    ReadoutLogits out = model->forward(single_sequence(g));
    ASSERT_EQ(out.full.size(), g.rows.size() * size_t(V));
    for (size_t r = 0; r < g.rows.size(); ++r) {
      ASSERT_EQ(g.logits[r].size(), size_t(V));
      double scale = 0.0, err = 0.0;
      for (int64_t v = 0; v < V; ++v) {
        scale = std::max(scale, std::abs(g.logits[r][v]));
        err = std::max(err, std::abs(out.full[r * V + v] - g.logits[r][v]));
      }
      worst = std::max(worst, err / scale);
      EXPECT_LE(err / scale, 1e-4) << "length " << g.ids.size() << " row " << g.rows[r];
    }
  }
  std::printf("%s %s: max relative logit error %.3e\n", GetParam().dir,
              GetParam().dtype == DType::DType_f32 ? "f32" : "f64", worst);
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, Golden,
    testing::Values(CheckpointParam{"tests/data/golden_gqa", DType::DType_f32},
                    CheckpointParam{"tests/data/golden_gqa", DType::DType_f64},
                    CheckpointParam{"tests/data/golden_tied_sharded", DType::DType_f32},
                    CheckpointParam{"tests/data/golden_tied_sharded", DType::DType_f64},
                    CheckpointParam{"models/flide-tiny-random", DType::DType_f32}),
    [](const auto& info) { return test::checkpoint_param_name(info.param); });

}  // namespace
}  // namespace flide
