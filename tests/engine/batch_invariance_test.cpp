// Batch-invariant mode on the CPU backend (make_cpu_ops): a tree's answers are the same bits
// whether it runs alone or packed into a round with other requests, in float32 and float64 on
// all cores. Without the mode, OpenBLAS's paths for other row counts change the last bits.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "common/round_invariance.h"

namespace flide {
namespace {

const std::filesystem::path kRoot = FLIDE_SOURCE_DIR;
struct Case {
  const char* dir;
  DType dtype;
};

class CpuBatchInvariance : public testing::TestWithParam<Case> {};

TEST_P(CpuBatchInvariance, TreeAloneAndAmongOthersGiveTheSameBits) {
  const std::filesystem::path dir = kRoot / GetParam().dir;
  if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP() << dir << " is missing";
  const std::unique_ptr<Ops> ops = make_cpu_ops(GetParam().dtype, 0, /*batch_invariant=*/true);
  const std::unique_ptr<Model> model = load_model(dir, *ops);
  Executor exec(*model);
  std::mt19937 rng(std::random_device{}());
  test::expect_same_bits(test::run_alone_and_among(exec, rng, model->info().vocab_size));
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CpuBatchInvariance,
                         testing::Values(Case{"models/flide-tiny-random", DType::DType_f32},
                                         Case{"models/flide-tiny-random", DType::DType_f64},
                                         Case{"tests/data/golden_gqa", DType::DType_f32},
                                         Case{"tests/data/golden_tied_sharded", DType::DType_f32}),
                         [](const auto& info) {
                           std::string name =
                               std::filesystem::path(info.param.dir).filename().string() +
                               (info.param.dtype == DType::DType_f32 ? "_f32" : "_f64");
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace flide
