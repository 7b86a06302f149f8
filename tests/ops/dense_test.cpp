// Token-wise ops against float64 loops: embed, rmsnorm, matmul, matmul_add, silu_mul, swiglu,
// sigmoid_mul, gather_rows; f32 and f64 backends over a grid of odd shapes.
#include <cmath>
#include <random>
#include <tuple>

#include "ops_test_util.h"

namespace flide::test {
namespace {

struct Shape {
  int64_t rows, cols;
};

class DenseTest : public ::testing::TestWithParam<std::tuple<DType, Shape>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  int64_t R() const { return std::get<1>(GetParam()).rows; }
  int64_t C() const { return std::get<1>(GetParam()).cols; }
  // A seed that differs per test and per parameter.
  std::mt19937 rng(int salt) const {
    return std::mt19937(
        fresh_seed(uint32_t(1000 * salt + 31 * R() + C() + (dtype() == DType::DType_f64))));
  }
};

double sigmoid_ref(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

TEST_P(DenseTest, Embed) {
  auto gen = rng(1);
  const int64_t V = 23;
  Stream s = build_stream({NodeSpec{-1, int(R())}}, 0, gen, int(V));
  const auto table = random_floats(gen, V * C(), -1, 1);
  Device dev(dtype());
  dev.ops().set_stream(s);
  View out = dev.poison(R(), C());
  dev.ops().embed(dev.put(V, C(), table), out);
  Vec ref;
  for (int32_t id : s.token_ids)
    for (int64_t c = 0; c < C(); ++c) ref.push_back(table[id * C() + c]);
  EXPECT_EQ(rel_err(dev.get(out), ref), 0.0);  // a copy of float values: exact
}

TEST_P(DenseTest, RmsNorm) {
  for (bool unit_offset : {true, false}) {
    for (bool in_place : {false, true}) {
      auto gen = rng(2 + 2 * unit_offset + in_place);
      const auto x = random_floats(gen, R() * C(), -3, 2);
      const auto w = random_floats(gen, C(), -0.5, 0.5);
      const double eps = 1e-6;
      Device dev(dtype());
      View xv = dev.put(R(), C(), x);
      View out = in_place ? xv : dev.poison(R(), C());
      dev.ops().rmsnorm(xv, dev.put(1, C(), w), out, eps, unit_offset);
      Vec ref(size_t(R() * C()));
      for (int64_t r = 0; r < R(); ++r) {
        double sum_sq = 0;
        for (int64_t c = 0; c < C(); ++c) sum_sq += double(x[r * C() + c]) * x[r * C() + c];
        const double inv = 1.0 / std::sqrt(sum_sq / double(C()) + eps);
        for (int64_t c = 0; c < C(); ++c)
          ref[r * C() + c] = x[r * C() + c] * inv * (unit_offset ? 1.0 + w[c] : double(w[c]));
      }
      expect_close(
          "rmsnorm", dtype(), dev.get(out), ref, tol(dtype()),
          "unit_offset " + std::to_string(unit_offset) + " in_place " + std::to_string(in_place));
    }
  }
}

TEST_P(DenseTest, SiluMul) {
  for (bool in_place : {false, true}) {  // the model writes the product over the gate
    auto gen = rng(7 + in_place);
    const auto g = random_floats(gen, R() * C(), -12, 12);
    const auto u = random_floats(gen, R() * C(), -2, 2);
    Device dev(dtype());
    View gv = dev.put(R(), C(), g);
    View out = in_place ? gv : dev.poison(R(), C());
    dev.ops().silu_mul(gv, dev.put(R(), C(), u), out);
    Vec ref(g.size());
    for (size_t i = 0; i < g.size(); ++i) ref[i] = g[i] * sigmoid_ref(g[i]) * u[i];
    expect_close("silu_mul", dtype(), dev.get(out), ref, tol(dtype()));
  }
}

TEST_P(DenseTest, Swiglu) {  // Ops' default: the two products, then silu_mul
  auto gen = rng(11);
  const int64_t K = C(), N = 5;
  const auto x = random_floats(gen, R() * K, -1, 1);
  const auto wg = random_floats(gen, N * K, -1, 1), wu = random_floats(gen, N * K, -1, 1);
  Device dev(dtype());
  View out = dev.poison(R(), N);
  dev.ops().swiglu(dev.put(R(), K, x), dev.put(N, K, wg), dev.put(N, K, wu), out);
  Vec ref(size_t(R() * N));
  for (int64_t r = 0; r < R(); ++r)
    for (int64_t n = 0; n < N; ++n) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) {
        g += double(x[r * K + k]) * wg[n * K + k];
        u += double(x[r * K + k]) * wu[n * K + k];
      }
      ref[r * N + n] = g * sigmoid_ref(g) * u;
    }
  expect_close("swiglu", dtype(), dev.get(out), ref, tol(dtype()));
}

TEST_P(DenseTest, SigmoidMul) {
  auto gen = rng(9);
  const auto x = random_floats(gen, R() * C(), -2, 2), g = random_floats(gen, R() * C(), -12, 12);
  Device dev(dtype());
  View xv = dev.put(R(), C(), x);
  dev.ops().sigmoid_mul(xv, dev.put(R(), C(), g));
  Vec ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = x[i] * sigmoid_ref(g[i]);
  expect_close("sigmoid_mul", dtype(), dev.get(xv), ref, tol(dtype()));
}

TEST_P(DenseTest, GatherRows) {
  auto gen = rng(10);
  Stream s = build_stream({NodeSpec{-1, int(R())}}, 0, gen);
  s.out_rows = pick_out_rows(s, gen, 0.5);
  const auto x = random_floats(gen, R() * C(), -1, 1);
  Device dev(dtype());
  dev.ops().set_stream(s);
  View out = dev.poison(int64_t(s.out_rows.size()), C());
  dev.ops().gather_rows(dev.put(R(), C(), x), out);
  EXPECT_EQ(rel_err(dev.get(out), gather(widen(x), C(), s.out_rows)), 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, DenseTest,
    ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                       ::testing::Values(Shape{1, 1}, Shape{1, 37}, Shape{5, 64}, Shape{17, 129},
                                         Shape{64, 3}, Shape{3, 300}, Shape{33, 1024})),
    [](const auto& info) {
      const Shape s = std::get<1>(info.param);
      return dtype_label(std::get<0>(info.param)) + "_" + std::to_string(s.rows) + "x" +
             std::to_string(s.cols);
    });

// ---- matmul: out[R, N] = x[R, K] . w[N, K]^T ----

struct MatmulShape {
  int64_t R, K, N;
};

class MatmulTest : public ::testing::TestWithParam<std::tuple<DType, MatmulShape>> {};

// matmul, and matmul_add onto an accumulator of the same magnitude as the product (the residual
// stream's case): acc + x . w^T.
TEST_P(MatmulTest, MatchesLoop) {
  const auto [dtype, sh] = GetParam();
  std::mt19937 gen(
      fresh_seed(uint32_t(sh.R * 7 + sh.K * 13 + sh.N * 17 + (dtype == DType::DType_f64))));
  const auto x = random_floats(gen, sh.R * sh.K, -1, 1), w = random_floats(gen, sh.N * sh.K, -1, 1);
  const auto acc = random_floats(gen, sh.R * sh.N, -2, 2);
  Device dev(dtype);
  View xv = dev.put(sh.R, sh.K, x), wv = dev.put(sh.N, sh.K, w);
  View out = dev.poison(sh.R, sh.N), accv = dev.put(sh.R, sh.N, acc);
  dev.ops().matmul(xv, wv, out);
  dev.ops().matmul_add(xv, wv, accv);
  Vec ref(size_t(sh.R * sh.N)), ref_add(ref.size());
  for (int64_t r = 0; r < sh.R; ++r)
    for (int64_t n = 0; n < sh.N; ++n) {
      double dot = 0;
      for (int64_t k = 0; k < sh.K; ++k) dot += double(x[r * sh.K + k]) * w[n * sh.K + k];
      ref[r * sh.N + n] = dot;
      ref_add[r * sh.N + n] = acc[r * sh.N + n] + dot;
    }
  expect_close("matmul", dtype, dev.get(out), ref, tol(dtype));
  expect_close("matmul_add", dtype, dev.get(accv), ref_add, tol(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Grid, MatmulTest,
    ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                       ::testing::Values(MatmulShape{1, 1, 1}, MatmulShape{1, 37, 5},
                                         MatmulShape{7, 64, 33}, MatmulShape{65, 129, 17},
                                         MatmulShape{3, 300, 200}, MatmulShape{130, 96, 1})),
    [](const auto& info) {
      const MatmulShape s = std::get<1>(info.param);
      return dtype_label(std::get<0>(info.param)) + "_" + std::to_string(s.R) + "x" +
             std::to_string(s.K) + "x" + std::to_string(s.N);
    });

}  // namespace
}  // namespace flide::test
