// Gated DeltaNet ops on the CUDA backend against the CPU float64 backend, level by level over
// the shared tree streams (the model's call pattern): gdn_conv (kernel 4, with initial and fresh
// window slots, key heads of 8 to 128 channels), gdn_gates, and the delta rule with Dk x Dv =
// 16x24, 8x12 (the golden_gqa checkpoint) and 128x128 (the real models), grouped value heads,
// initial state slots and in-place slots. The CUDA backend runs the chunked kernel for both
// forms, so the recurrent case checks it against the CPU's token-by-token recurrence. Outputs,
// windows and fresh slots start as NaN on both sides. Padded streams (a round padded to its
// capacity bucket, engine/round_capacity.h) give the delta rule NaN inputs on their padding rows,
// which no real row may read, and must leave its output's padding rows zero (backend/stream.h).
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "engine/round_capacity.h"

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

// ---- the projection and the conv in one GEMM ----

struct QkvConvShape {
  int heads_k, dim_k, value_dim, H;
};
void PrintTo(const QkvConvShape& c, std::ostream* os) {
  *os << c.heads_k << "x" << c.dim_k << " v" << c.value_dim << " H" << c.H;
}

// The shared trees and one with many short nodes: children of 1 to 5 rows after a 150-row root,
// some with children of their own, so that nodes shorter than the conv's window start and end
// at the fused kernel's tile (125 rows) and epilogue-warp (42 rows) boundaries.
std::vector<TreeCase> qkv_conv_trees() {
  std::vector<TreeCase> trees = tree_cases();
  TreeCase shorts{"short_children", {NodeSpec{-1, 150}}, 0};
  for (int i = 0; i < 120; ++i) shorts.nodes.push_back(NodeSpec{0, 1 + i % 5});
  for (int i = 1; i <= 120; i += 7) shorts.nodes.push_back(NodeSpec{i, 1 + i % 3});
  trees.push_back(shorts);
  return trees;
}

class CudaQkvConv : public CudaTestWithParam<std::tuple<TreeCase, QkvConvShape>> {};

// The fused GEMM (dim_k 128, C a multiple of 256, no slot read and written by one node) and the
// unfused matmul and convs elsewhere, against the float64 reference (the conv's tolerance: the
// product rounded to bf16 adds one rounding); the fused outputs against the GPU's unfused steps
// too (within two bf16 steps of the output's scale: a wrong tap or window moves an output by
// its order); and which path ran, from the GPU's profile.
TEST_P(CudaQkvConv, MatchesReferenceAndUnfused) {
  const auto& [tree, sh] = GetParam();
  const int64_t Dk = sh.dim_k, Kd = sh.heads_k * Dk, Vd = sh.value_dim, C = 2 * Kd + Vd;
  const int64_t H = sh.H, K = 4, W = (K - 1) * C;
  std::mt19937 gen{std::random_device{}()};
  const Stream s = build_stream(tree.nodes, tree.n_initial_slots, gen);
  const int64_t T = s.n_tokens(), slots = std::max(s.n_slots, 1);
  Pair p;
  p.set_stream(s);
  const double scale = 2.0 / std::sqrt(double(H));  // projections of order 1
  auto x = p.put(T, H, random_floats(gen, T * H, -1, 1));
  auto wq = p.put(C, H, random_floats(gen, C * H, -scale, scale));
  auto w = p.put(C, K, random_floats(gen, C * K, -1, 1));
  const std::vector<float> window0 = initial_slots(gen, s, tree.n_initial_slots, W, -2, 2);
  auto window = p.put(slots, W, window0);
  auto q = p.poison(T, Kd), k = p.poison(T, Kd), v = p.poison(T, Vd);
  Ops& gpu = p.gpu();
  const bool in_place = std::any_of(s.nodes.begin(), s.nodes.end(), [](const StreamNode& n) {
    return n.slot_in >= 0 && n.slot_in == n.slot_out;
  });
  const bool fused = !in_place && Dk == 128 && C % 256 == 0;
  const auto ran = ops_run(gpu, [&] {
    gpu.gdn_qkv_conv(x.gpu, wq.gpu, w.gpu, window.gpu, q.gpu, k.gpu, v.gpu, int(Dk), 1e-6,
                     s.n_levels());
  });
  const std::set<std::string> expected =
      fused ? std::set<std::string>{"gdn_qkv_conv"} : std::set<std::string>{"matmul", "gdn_conv"};
  EXPECT_EQ(ran, expected);
  p.cpu().gdn_qkv_conv(x.cpu, wq.cpu, w.cpu, window.cpu, q.cpu, k.cpu, v.cpu, int(Dk), 1e-6,
                       s.n_levels());
  const std::string context = cat(tree.name, " ", sh.heads_k, "x", Dk, " v", Vd, " H", H);
  const std::string op = fused ? "gdn_qkv_conv (fused)" : "gdn_qkv_conv (matmul + gdn_conv)";
  expect_rms(op + " q", p.got(q), p.ref(q), kTolBf16, context);
  expect_rms(op + " k", p.got(k), p.ref(k), kTolBf16, context);
  expect_rms(op + " v", p.got(v), p.ref(v), kTolBf16, context);
  // Windows: the product's bf16 values (the reference keeps them in float64).
  expect_rms(op + " window", first_slots(p.got(window), s.n_slots, W),
             first_slots(p.ref(window), s.n_slots, W), kTolBf16, context);

  if (!fused) return;
  // The GPU's unfused steps on the same inputs.
  View qkv = gpu.scratch(T, C), win2 = gpu.alloc(slots, W);
  View q2 = gpu.alloc(T, Kd), k2 = gpu.alloc(T, Kd), v2 = gpu.alloc(T, Vd);
  const std::vector<float> window0_bf16 = rounded_bf16(window0);
  gpu.upload(win2, window0_bf16.data());
  gpu.matmul(x.gpu, wq.gpu, qkv);
  for (int level = 0; level < s.n_levels(); ++level)
    gpu.gdn_conv(qkv, w.gpu, win2, q2, k2, v2, int(Dk), 1e-6, level);
  auto expect_near = [&](const char* what, const Vec& got, const Vec& ref) {
    double peak = 0, worst = 0;
    int64_t same = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      peak = std::max(peak, std::abs(ref[i]));
      worst = std::max(worst, std::isnan(got[i]) ? INFINITY : std::abs(got[i] - ref[i]));
      same += got[i] == ref[i];
    }
    EXPECT_LE(worst, peak / 64) << what << " " << context << ": fused against unfused";
    record(cat(op, " ", what, " vs unfused"), worst / std::max(peak, 1e-30), 1.0 / 64);
    if (same != int64_t(ref.size()))
      CudaReport::lines().push_back(cat("gdn_qkv_conv ", what, " ", context, ": ",
                                        ref.size() - same, " of ", ref.size(),
                                        " outputs differ from the unfused path's bits"));
  };
  expect_near("q", p.got(q), p.got(q2));
  expect_near("k", p.got(k), p.got(k2));
  expect_near("v", p.got(v), p.got(v2));
  expect_near("window", first_slots(p.got(window), s.n_slots, W),
              first_slots(p.got(win2), s.n_slots, W));
}

// Fused: the 0.8B/2B layer (16 key heads of 128, Vd 2048, H 1024), a narrower one with a tile
// pair across q | k (3 key heads: C = 1280, Kd 384) and a hidden size that is not a multiple of
// the 64-wide k-block (H 200), and one whose weight (26 MB) takes the grouped tile order.
// Unfused: key heads of 16 (the test checkpoints).
INSTANTIATE_TEST_SUITE_P(
    Trees, CudaQkvConv,
    ::testing::Combine(::testing::ValuesIn(qkv_conv_trees()),
                       ::testing::Values(QkvConvShape{16, 128, 2048, 1024},
                                         QkvConvShape{3, 128, 512, 200},
                                         // a weight past L2's share (26 MB): grouped order
                                         QkvConvShape{8, 128, 3072, 2560},
                                         QkvConvShape{2, 16, 96, 64})),
    [](const auto& info) {
      const QkvConvShape c = std::get<1>(info.param);
      return cat(std::get<0>(info.param).name, "_h", c.heads_k, "x", c.dim_k, "v", c.value_dim, "H",
                 c.H);
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
  double g_lo = -0.6;   // g ~ U(g_lo, -0.01): per-token decay exp(g)
  bool padded = false;  // the stream padded to its capacity bucket
};

void PrintTo(const GdnCase& c, std::ostream* os) {
  *os << c.tree.name << " " << c.shape.heads_k << "/" << c.shape.heads_v << " " << c.shape.dim_k
      << "x" << c.shape.dim_v << (c.padded ? " padded" : "");
}

class CudaGdn : public CudaTestWithParam<GdnCase> {};

// q, k have unit L2 norm per head (the model l2-normalises them), beta in (0.05, 0.95): the
// recurrence is contractive, as in the model, so errors do not grow with the sequence.
TEST_P(CudaGdn, OutputsAndStateSlots) {
  const GdnCase& c = GetParam();
  const auto [Hk, Hv, Dk, Dv] = c.shape;
  std::mt19937 gen{uint32_t(c.tree.nodes.size() * 7 + Hk * 131 + Hv * 17 + Dk + Dv)};
  Stream s = build_stream(c.tree.nodes, c.tree.n_initial_slots, gen);
  const int32_t written_slots = s.n_slots;  // padding rounds the slot count up, to unused slots
  if (c.padded) {
    s = pad_stream(s, *capacity_for(s, 1 << 20));
    ASSERT_GT(s.pad_tokens, 0);
  }
  const int64_t T = s.n_tokens(), Ck = int64_t(Hk) * Dk, Cv = int64_t(Hv) * Dv;
  const int64_t S = int64_t(Hv) * Dk * Dv, slots = std::max(s.n_slots, 1);
  // NaN on the padding rows' inputs, which no real row may read.
  const auto real = [&](std::vector<float> host, int64_t cols) {
    std::fill(host.end() - s.pad_tokens * cols, host.end(),
              std::numeric_limits<float>::quiet_NaN());
    return host;
  };
  Pair p;
  p.set_stream(s);
  auto q = p.put(T, Ck, real(unit_rows(random_floats(gen, T * Ck, -1, 1), Dk), Ck));
  auto k = p.put(T, Ck, real(unit_rows(random_floats(gen, T * Ck, -1, 1), Dk), Ck));
  auto v = p.put(T, Cv, real(random_floats(gen, T * Cv, -1, 1), Cv));
  auto g = p.put(T, Hv, real(random_floats(gen, T * Hv, c.g_lo, -0.01), Hv), true);
  auto beta = p.put(T, Hv, real(random_floats(gen, T * Hv, 0.05, 0.95), Hv), true);
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
  if (c.padded) expect_zero_rows(label + " out", p.got(out), T - s.pad_tokens, Cv);
  if (written_slots > 0)
    expect_rms(label + " state", first_slots(p.got(state), written_slots, S),
               first_slots(p.ref(state), written_slots, S), kTolState, context.str());
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
  for (int t : {2, 3})
    for (GdnShape shape : {GdnShape{1, 2, 16, 24}, GdnShape{2, 4, 128, 128}})
      cases.push_back({tree_cases()[t], shape, GdnForm::GdnForm_chunked, -0.6, true});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Trees, CudaGdn, ::testing::ValuesIn(gdn_cases()), [](const auto& info) {
  const GdnCase& c = info.param;
  return cat(c.tree.name, "_", c.shape.heads_k, "_", c.shape.heads_v, "_", c.shape.dim_k, "x",
             c.shape.dim_v, c.form == GdnForm::GdnForm_recurrent ? "_recurrent" : "",
             c.g_lo < -1 ? "_strong_decay" : "", c.padded ? "_padded" : "");
});

}  // namespace
}  // namespace flide::test
