// Gated DeltaNet ops on the CUDA backend against the CPU float64 backend, level by level over
// the shared tree streams (the model's call pattern): gdn_conv (kernel 4, with initial and fresh
// window slots, key heads of 8 to 128 channels), gdn_gates, and the delta rule with Dk x Dv =
// 16x24, 8x12 (the golden_gqa checkpoint) and 128x128 (the real models), grouped value heads,
// initial state slots and in-place slots. The CUDA backend runs the chunked kernel for both
// forms, so the recurrent case checks it against the CPU's token-by-token recurrence. Outputs,
// windows and fresh slots start as NaN on both sides.
#include <random>
#include <tuple>

#include "cuda_test_util.h"

namespace flide::test {
namespace {

// Host data of a [max(n_slots, 1), cols] slot buffer: the first n_initial slots random, the
// others NaN (written by a level before anything reads them).
std::vector<float> initial_slots(std::mt19937& gen, const Stream& s, int n_initial, int64_t cols,
                                 double lo, double hi) {
  const int64_t rows = std::max(s.n_slots, 1);
  std::vector<float> host = random_floats(gen, rows * cols, lo, hi);
  std::fill(host.begin() + int64_t(n_initial) * cols, host.end(),
            std::numeric_limits<float>::quiet_NaN());
  return host;
}

// The first n slots of a downloaded slot buffer.
Vec first_slots(const Vec& all, int n, int64_t cols) {
  return Vec(all.begin(), all.begin() + int64_t(n) * cols);
}

// ---- causal conv + SiLU, split into q, k, v, q/k L2 norm ----

struct ConvShape {
  int heads_k, dim_k, value_dim;
};
void PrintTo(const ConvShape& c, std::ostream* os) {
  *os << c.heads_k << "x" << c.dim_k << " v" << c.value_dim;
}

class CudaConv : public CudaTestWithParam<std::tuple<TreeCase, ConvShape>> {};

TEST_P(CudaConv, LevelByLevel) {
  const auto& [tree, sh] = GetParam();
  const int64_t Dk = sh.dim_k, Kd = sh.heads_k * Dk, Vd = sh.value_dim, C = 2 * Kd + Vd;
  const int64_t K = 4, W = (K - 1) * C;
  std::mt19937 gen{uint32_t(tree.nodes.size() * 31 + C + Dk)};
  const Stream s = build_stream(tree.nodes, tree.n_initial_slots, gen);
  const int64_t T = s.n_tokens(), slots = std::max(s.n_slots, 1);
  Pair p;
  p.set_stream(s);
  auto x = p.put(T, C, random_floats(gen, T * C, -2, 2));
  auto w = p.put(C, K, random_floats(gen, C * K, -1, 1));
  auto window = p.put(slots, W, initial_slots(gen, s, tree.n_initial_slots, W, -2, 2));
  auto q = p.poison(T, Kd), k = p.poison(T, Kd), v = p.poison(T, Vd);
  for (int level = 0; level < s.n_levels(); ++level)
    p.both([&](Ops& ops, auto b) {
      ops.gdn_conv(b(x), b(w), b(window), b(q), b(k), b(v), int(Dk), 1e-6, level);
    });
  const std::string context = cat(tree.name, " ", sh.heads_k, "x", Dk, " v", Vd);
  // q and k: the SiLU output is rounded to bf16 before the norm and the result once more.
  expect_rms("gdn_conv q", p.got(q), p.ref(q), kTolBf16, context);
  expect_rms("gdn_conv k", p.got(k), p.ref(k), kTolBf16, context);
  expect_rms("gdn_conv v", p.got(v), p.ref(v), kTolBf16, context);
  // Windows hold copies of bf16 inputs: identical bits (unwritten slots stay NaN on both).
  expect_exact("gdn_conv window", p.got(window), p.ref(window), context);
}

// Key heads of 128 (every Qwen3.5 size: a head is one warp of 4-channel lanes), among them the
// 0.8B/2B layer (16 heads, Vd 2048); the test checkpoints' 8 and 16 (golden_gqa, shipped model);
// 12 and 24 (heads padded to 4 and 8 lanes); 16 with an odd value width (1 channel a lane) and 24
// with an even one (2 channels a lane, a head padded to 16 lanes).
INSTANTIATE_TEST_SUITE_P(
    Trees, CudaConv,
    ::testing::Combine(::testing::ValuesIn(tree_cases()),
                       ::testing::Values(ConvShape{4, 128, 512}, ConvShape{16, 128, 2048},
                                         ConvShape{2, 8, 72}, ConvShape{2, 16, 96},
                                         ConvShape{3, 12, 24}, ConvShape{1, 24, 40},
                                         ConvShape{2, 16, 37}, ConvShape{1, 24, 38})),
    [](const auto& info) {
      const ConvShape c = std::get<1>(info.param);
      return cat(std::get<0>(info.param).name, "_h", c.heads_k, "x", c.dim_k, "v", c.value_dim);
    });

// ---- gates ----

class CudaGates : public CudaTestWithParam<std::tuple<int64_t, int>> {};

TEST_P(CudaGates, GAndBetaInFp32) {
  const auto [T, Hv] = GetParam();
  std::mt19937 gen{uint32_t(T * 3 + Hv)};
  Pair p;
  auto ab = p.put(T, 2 * Hv, random_floats(gen, T * 2 * Hv, -6, 6));
  auto A_log = p.put(1, Hv, random_floats(gen, Hv, -1, 1.5));
  auto dt_bias = p.put(1, Hv, random_floats(gen, Hv, -1, 1));
  auto g = p.poison(T, Hv, true), beta = p.poison(T, Hv, true);
  p.both([&](Ops& ops, auto v) { ops.gdn_gates(v(ab), v(A_log), v(dt_bias), v(g), v(beta)); });
  expect_rms("gdn_gates g", p.got(g), p.ref(g), kTolF32Out, cat("T ", T, " Hv ", Hv));
  expect_rms("gdn_gates beta", p.got(beta), p.ref(beta), kTolF32Out, cat("T ", T, " Hv ", Hv));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGates,
                         ::testing::Combine(::testing::Values(int64_t(1), int64_t(130),
                                                              int64_t(1000)),
                                            ::testing::Values(2, 6, 32)));

// ---- delta rule ----

struct GdnShape {
  int heads_k, heads_v, dim_k, dim_v;
};

struct GdnCase {
  TreeCase tree;
  GdnShape shape;
  GdnForm form = GdnForm::GdnForm_chunked;
  double g_lo = -0.6;  // g ~ U(g_lo, -0.01): per-token decay exp(g)
};

void PrintTo(const GdnCase& c, std::ostream* os) {
  *os << c.tree.name << " " << c.shape.heads_k << "/" << c.shape.heads_v << " " << c.shape.dim_k
      << "x" << c.shape.dim_v;
}

class CudaGdn : public CudaTestWithParam<GdnCase> {};

// q, k have unit L2 norm per head (the model l2-normalises them), beta in (0.05, 0.95): the
// recurrence is contractive, as in the model, so errors do not grow with the sequence.
TEST_P(CudaGdn, OutputsAndStateSlots) {
  const GdnCase& c = GetParam();
  const auto [Hk, Hv, Dk, Dv] = c.shape;
  std::mt19937 gen{uint32_t(c.tree.nodes.size() * 7 + Hk * 131 + Hv * 17 + Dk + Dv)};
  const Stream s = build_stream(c.tree.nodes, c.tree.n_initial_slots, gen);
  const int64_t T = s.n_tokens(), Ck = int64_t(Hk) * Dk, Cv = int64_t(Hv) * Dv;
  const int64_t S = int64_t(Hv) * Dk * Dv, slots = std::max(s.n_slots, 1);
  Pair p;
  p.set_stream(s);
  auto q = p.put(T, Ck, unit_rows(random_floats(gen, T * Ck, -1, 1), Dk));
  auto k = p.put(T, Ck, unit_rows(random_floats(gen, T * Ck, -1, 1), Dk));
  auto v = p.put(T, Cv, random_floats(gen, T * Cv, -1, 1));
  auto g = p.put(T, Hv, random_floats(gen, T * Hv, c.g_lo, -0.01), true);
  auto beta = p.put(T, Hv, random_floats(gen, T * Hv, 0.05, 0.95), true);
  auto state = p.put(slots, S, initial_slots(gen, s, c.tree.n_initial_slots, S, -0.5, 0.5), true);
  auto out = p.poison(T, Cv);
  for (int level = 0; level < s.n_levels(); ++level)
    p.both([&](Ops& ops, auto side) {
      ops.gdn(side(q), side(k), side(v), side(g), side(beta), side(state), side(out), level, Hk, Hv,
              Dk, Dv, c.form);
    });
  const std::string label =
      cat("gdn ", Dk, "x", Dv, c.form == GdnForm::GdnForm_recurrent ? " vs recurrent" : "");
  std::ostringstream context;
  PrintTo(c, &context);
  expect_rms(label + " out", p.got(out), p.ref(out), kTolBf16, context.str());
  if (s.n_slots > 0)
    expect_rms(label + " state", first_slots(p.got(state), s.n_slots, S),
               first_slots(p.ref(state), s.n_slots, S), kTolState, context.str());
}

std::vector<GdnCase> gdn_cases() {
  std::vector<GdnCase> cases;
  for (const TreeCase& tree : tree_cases())
    for (GdnShape shape : {GdnShape{1, 2, 16, 24}, GdnShape{2, 6, 8, 12}, GdnShape{2, 4, 128, 128}})
      cases.push_back({tree, shape});
  // The chunked CUDA kernel against the CPU's token-by-token recurrence.
  for (const TreeCase& tree : tree_cases())
    cases.push_back({tree, {1, 2, 16, 24}, GdnForm::GdnForm_recurrent});
  // Levels wider than the GPU (70 nodes: more blocks than the kernels' grids, which walk their
  // items in stride loops), as several requests' trunks in one round are.
  TreeCase wide{"wide_levels", {}, 10};
  for (int i = 0; i < 70; ++i)
    wide.nodes.push_back({-1, 1 + (i * 37) % 150, i % 7 == 0 ? i / 7 : -1, -2, i});
  for (int i = 0; i < 70; ++i)
    if (i % 10 != 3) wide.nodes.push_back({i, 1 + (i * 13) % 70});
  for (GdnShape shape : {GdnShape{1, 2, 16, 24}, GdnShape{2, 4, 128, 128}})
    cases.push_back({wide, shape});
  // Strong decay: in-chunk cumulative g reaches ~-250, where exp(gamma) underflows in fp32.
  cases.push_back({tree_cases()[2], {1, 2, 16, 24}, GdnForm::GdnForm_chunked, -8.0});
  cases.push_back({tree_cases()[2], {2, 4, 128, 128}, GdnForm::GdnForm_chunked, -8.0});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Trees, CudaGdn, ::testing::ValuesIn(gdn_cases()), [](const auto& info) {
  const GdnCase& c = info.param;
  return cat(c.tree.name, "_", c.shape.heads_k, "_", c.shape.heads_v, "_", c.shape.dim_k, "x",
             c.shape.dim_v, c.form == GdnForm::GdnForm_recurrent ? "_recurrent" : "",
             c.g_lo < -1 ? "_strong_decay" : "");
});

}  // namespace
}  // namespace flide::test
