// select_logits against a float64 loop: logits of chosen token ids at chosen out rows.
#include <random>
#include <tuple>

#include "ops_test_util.h"

namespace flide::test {
namespace {

struct ReadoutShape {
  int tokens, hidden, vocab, selects;
};

class ReadoutTest : public ::testing::TestWithParam<std::tuple<DType, ReadoutShape>> {};

TEST_P(ReadoutTest, SelectLogits) {
  const auto [dtype, sh] = GetParam();
  std::mt19937 gen(fresh_seed(uint32_t(sh.tokens * 3 + sh.hidden * 5 + sh.selects + int(dtype))));
  Stream s = build_stream({NodeSpec{-1, sh.tokens}}, 0, gen);
  s.out_rows = pick_out_rows(s, gen, 0.3);
  const int64_t R = int64_t(s.out_rows.size());
  std::uniform_int_distribution<int> row(0, int(R) - 1), id(0, sh.vocab - 1);
  for (int m = 0; m < sh.selects; ++m) {
    s.select_out.push_back(row(gen));
    s.select_ids.push_back(id(gen));
  }
  const auto h = random_floats(gen, R * sh.hidden, -1, 1);
  const auto w = random_floats(gen, int64_t(sh.vocab) * sh.hidden, -1, 1);
  Device dev(dtype);
  dev.ops().set_stream(s);
  View out = dev.poison(sh.selects, 1);
  dev.ops().select_logits(dev.put(R, sh.hidden, h), dev.put(sh.vocab, sh.hidden, w), out);
  Vec ref;
  for (int m = 0; m < sh.selects; ++m) {
    double dot = 0;
    for (int c = 0; c < sh.hidden; ++c)
      dot +=
          double(h[s.select_out[m] * sh.hidden + c]) * w[int64_t(s.select_ids[m]) * sh.hidden + c];
    ref.push_back(dot);
  }
  expect_close("select_logits", dtype, dev.get(out), ref, tol(dtype));
}

INSTANTIATE_TEST_SUITE_P(Grid, ReadoutTest,
                         ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                                            ::testing::Values(ReadoutShape{1, 1, 1, 1},
                                                              ReadoutShape{1, 37, 11, 4},
                                                              ReadoutShape{40, 64, 50, 23},
                                                              ReadoutShape{130, 257, 300, 64})),
                         [](const auto& info) {
                           const ReadoutShape s = std::get<1>(info.param);
                           return dtype_label(std::get<0>(info.param)) + "_" +
                                  std::to_string(s.tokens) + "x" + std::to_string(s.hidden) + "x" +
                                  std::to_string(s.vocab) + "x" + std::to_string(s.selects);
                         });

}  // namespace
}  // namespace flide::test
