// Batch-invariant mode on the CPU backend (make_cpu_ops): a tree's answers are the same bits
// whether it runs alone or packed into a round with other requests, in float32 and float64 on
// all cores. Without the mode, OpenBLAS rounds a row by the call's row count and by the row's place
// in its kernel's tiles, which change the last bits.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "common/checkpoint_param.h"
#include "common/round_invariance.h"

namespace flide {
namespace {

using test::CheckpointParam;

const std::filesystem::path kRoot = FLIDE_SOURCE_DIR;

class CpuBatchInvariance : public testing::TestWithParam<CheckpointParam> {};

TEST_P(CpuBatchInvariance, TreeAloneAndAmongOthersGiveTheSameBits) {
  const std::filesystem::path dir = kRoot / GetParam().dir;
  if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << dir << " is missing";
  const std::unique_ptr<Ops> ops = make_cpu_ops(GetParam().dtype, 0, /*batch_invariant=*/true);
  const std::unique_ptr<Model> model = load_model(dir, *ops);
  Executor exec(*model);
  std::mt19937 rng(std::random_device{}());
  test::expect_same_bits(test::run_alone_and_among(exec, rng, model->info().vocab_size));
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, CpuBatchInvariance,
    testing::Values(CheckpointParam{"models/flide-tiny-random", DType::DType_f32},
                    CheckpointParam{"models/flide-tiny-random", DType::DType_f64},
                    CheckpointParam{"tests/data/golden_gqa", DType::DType_f32},
                    CheckpointParam{"tests/data/golden_tied_sharded", DType::DType_f32}),
    [](const auto& info) { return test::checkpoint_param_name(info.param); });

}  // namespace
}  // namespace flide
