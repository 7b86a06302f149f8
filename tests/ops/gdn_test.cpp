// Gated DeltaNet ops against float64 loops: gdn_conv (conv + SiLU, split, q/k L2 norm),
// gdn_gates, the delta rule in both forms, gated_rmsnorm, z_gated_rmsnorm. Conv and delta rule run
// level by level over tree streams (the model's call pattern) and are compared with an independent
// run of every root-to-node path as one sequence, from zero (or the test's initial window / state),
// on the node's rows and on the window / state each node with children leaves in its slot.
#include <cmath>
#include <random>
#include <tuple>

#include "ops_test_util.h"

namespace flide::test {
namespace {

double sigmoid_ref(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double silu_ref(double x) {
  return x * sigmoid_ref(x);
}

// Fills every slot >= n_initial with NaN: those are written by a level before anything reads
// them; slots below n_initial hold the test's initial values.
std::vector<float> slots_with_poison(std::mt19937& gen, const Stream& s, int n_initial,
                                     int64_t cols, double lo, double hi) {
  std::vector<float> host = random_floats(gen, int64_t(s.n_slots) * cols, lo, hi);
  std::fill(host.begin() + int64_t(n_initial) * cols, host.end(),
            std::numeric_limits<float>::quiet_NaN());
  return host;
}

// ---- causal conv + SiLU, split into q, k, v, q/k L2 norm ----

struct ConvShape {
  int heads_k, dim_k, value_dim, kernel;
};

class ConvTest : public ::testing::TestWithParam<std::tuple<DType, TreeCase, ConvShape>> {};

TEST_P(ConvTest, LevelsMatchPerPathConv) {
  const auto& [dtype, tree, sh] = GetParam();
  const int64_t Dk = sh.dim_k, Kd = sh.heads_k * Dk, Vd = sh.value_dim, C = 2 * Kd + Vd;
  const int64_t K = sh.kernel, W = (K - 1) * C;
  const double eps = 1e-6;
  std::mt19937 gen(fresh_seed(uint32_t(tree.nodes.size() * 101 + C * 7 + K + int(dtype))));
  Stream s = build_stream(tree.nodes, tree.n_initial_slots, gen);
  const int64_t T = s.n_tokens();
  const auto x = random_floats(gen, T * C, -2, 2);
  const auto w = random_floats(gen, C * K, -1, 1);
  const auto window0 = slots_with_poison(gen, s, tree.n_initial_slots, W, -2, 2);

  Device dev(dtype);
  dev.ops().set_stream(s);
  View xv = dev.put(T, C, x), wv = dev.put(C, K, w), window = dev.put(s.n_slots, W, window0);
  View q = dev.poison(T, Kd), k = dev.poison(T, Kd), v = dev.poison(T, Vd);
  for (int level = 0; level < s.n_levels(); ++level)
    dev.ops().gdn_conv(xv, wv, window, q, k, v, int(Dk), eps, level);
  const Vec got_window = dev.get(window);

  // conv + SiLU of every row, C channels, then split.
  Vec conv(size_t(T * C));
  for (int n = 0; n < int(s.nodes.size()); ++n) {
    // The path as one sequence, preceded by the root's initial window (or zeros).
    const int root = root_of(s, n);
    Vec seq(size_t(W), 0.0);
    if (s.nodes[root].slot_in >= 0)
      std::copy_n(window0.begin() + s.nodes[root].slot_in * W, W, seq.begin());
    const Vec path = gather(widen(x), C, path_rows(s, n));
    seq.insert(seq.end(), path.begin(), path.end());
    const int64_t L = int64_t(path.size()) / C, len = s.nodes[n].length;
    for (int64_t i = L - len; i < L; ++i)
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0;  // seq row (K - 1) + i is path row i
        for (int64_t j = 0; j < K; ++j) sum += double(w[c * K + j]) * seq[(i + j) * C + c];
        conv[(s.nodes[n].offset + i - (L - len)) * C + c] = silu_ref(sum);
      }
    if (s.nodes[n].slot_out >= 0) {  // the last K - 1 rows of the sequence
      const Vec tail(seq.end() - W, seq.end());
      const Vec slot(got_window.begin() + s.nodes[n].slot_out * W,
                     got_window.begin() + (s.nodes[n].slot_out + 1) * W);
      EXPECT_EQ(rel_err(slot, tail), 0.0) << tree.name << " window of node " << n;
    }
  }
  // q | k | v, each Dk-wide head of q and k over sqrt(sum of squares + eps).
  Vec ref_q, ref_k, ref_v;
  for (int64_t t = 0; t < T; ++t) {
    const double* row = conv.data() + t * C;
    for (Vec* out : {&ref_q, &ref_k})
      for (int64_t h = 0; h < Kd; h += Dk) {
        const double* head = row + (out == &ref_k ? Kd : 0) + h;
        double sum_sq = 0;
        for (int64_t d = 0; d < Dk; ++d) sum_sq += head[d] * head[d];
        for (int64_t d = 0; d < Dk; ++d) out->push_back(head[d] / std::sqrt(sum_sq + eps));
      }
    ref_v.insert(ref_v.end(), row + 2 * Kd, row + C);
  }
  expect_close("gdn_conv q", dtype, dev.get(q), ref_q, tol(dtype), tree.name);
  expect_close("gdn_conv k", dtype, dev.get(k), ref_k, tol(dtype), tree.name);
  expect_close("gdn_conv v", dtype, dev.get(v), ref_v, tol(dtype), tree.name);
}

// Key heads of 6 to 16 channels, one to three heads, odd value widths, kernels 1 (no window) to
// 7. No smaller heads: the norm divides the conv's absolute f32 rounding error (~1e-7, terms of
// size ~1 cancelling) by the head's length, which a head of one channel near zero pushes past the
// 1e-5 tolerance (5e-5 seen) and heads of 2 or 3 channels to within a factor of 3 of it.
INSTANTIATE_TEST_SUITE_P(
    Trees, ConvTest,
    ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                       ::testing::ValuesIn(tree_cases()),
                       ::testing::Values(ConvShape{1, 8, 5, 4}, ConvShape{2, 6, 13, 4},
                                         ConvShape{1, 7, 2, 2}, ConvShape{2, 6, 3, 1},
                                         ConvShape{1, 12, 8, 7}, ConvShape{3, 16, 24, 4})),
    [](const auto& info) {
      const ConvShape c = std::get<2>(info.param);
      return dtype_label(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name + "_h" +
             std::to_string(c.heads_k) + "x" + std::to_string(c.dim_k) + "v" +
             std::to_string(c.value_dim) + "k" + std::to_string(c.kernel);
    });

// ---- gates ----

class GatesTest : public ::testing::TestWithParam<std::tuple<DType, int, int>> {};

TEST_P(GatesTest, SoftplusAndSigmoid) {
  const auto [dtype, rows, heads] = GetParam();
  std::mt19937 gen(fresh_seed(uint32_t(rows * 13 + heads + int(dtype))));
  // a + dt_bias spans both sides of softplus's threshold (20).
  // Each row holds a (in [-30, 30]) then b (in [-12, 12]).
  std::vector<float> ab;
  for (int t = 0; t < rows; ++t) {
    const auto a = random_floats(gen, heads, -30, 30), b = random_floats(gen, heads, -12, 12);
    ab.insert(ab.end(), a.begin(), a.end());
    ab.insert(ab.end(), b.begin(), b.end());
  }
  const auto A_log = random_floats(gen, heads, -2, 2);
  const auto dt_bias = random_floats(gen, heads, -1, 1);
  Device dev(dtype);
  View g = dev.poison(rows, heads), beta = dev.poison(rows, heads);
  dev.ops().gdn_gates(dev.put(rows, 2 * heads, ab), dev.put(1, heads, A_log),
                      dev.put(1, heads, dt_bias), g, beta);
  Vec ref_g, ref_beta;
  for (int t = 0; t < rows; ++t)
    for (int j = 0; j < heads; ++j) {
      const double x = double(ab[(2 * t) * heads + j]) + dt_bias[j];
      const double softplus = x > 20 ? x : std::log1p(std::exp(x));
      ref_g.push_back(-std::exp(double(A_log[j])) * softplus);
      ref_beta.push_back(sigmoid_ref(ab[(2 * t + 1) * heads + j]));
    }
  expect_close("gdn_gates g", dtype, dev.get(g), ref_g, tol(dtype));
  expect_close("gdn_gates beta", dtype, dev.get(beta), ref_beta, tol(dtype));
}

INSTANTIATE_TEST_SUITE_P(Grid, GatesTest,
                         ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                                            ::testing::Values(1, 65), ::testing::Values(1, 3, 32)),
                         [](const auto& info) {
                           return dtype_label(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "x" +
                                  std::to_string(std::get<2>(info.param));
                         });

// ---- delta rule ----

struct GdnShape {
  int heads_k, heads_v, dim_k, dim_v;
};

class GdnTest : public ::testing::TestWithParam<std::tuple<DType, TreeCase, GdnShape>> {};

// HF torch_recurrent_gated_delta_rule for one value head over one sequence, in double, from S
// [Dk][Dv]; q is scaled by Dk^-1/2 here. Writes o rows [L][Dv] into out (stride `out_stride`).
void recurrence_ref(const Vec& q, const Vec& k, const Vec& v, const Vec& g, const Vec& beta,
                    int64_t L, int64_t dk, int64_t dv, Vec& S, double* out, int64_t out_stride) {
  const double scale = 1.0 / std::sqrt(double(dk));
  for (int64_t t = 0; t < L; ++t) {
    const double decay = std::exp(g[t]);
    for (double& x : S) x *= decay;
    std::vector<double> delta(static_cast<size_t>(dv));
    for (int64_t d = 0; d < dv; ++d) {
      double mem = 0;
      for (int64_t i = 0; i < dk; ++i) mem += S[i * dv + d] * k[t * dk + i];
      delta[d] = (v[t * dv + d] - mem) * beta[t];
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t d = 0; d < dv; ++d) S[i * dv + d] += k[t * dk + i] * delta[d];
    for (int64_t d = 0; d < dv; ++d) {
      double o = 0;
      for (int64_t i = 0; i < dk; ++i) o += S[i * dv + d] * q[t * dk + i] * scale;
      out[t * out_stride + d] = o;
    }
  }
}

// Per-head columns [col, col + width) of the rows of a [*, cols] matrix.
Vec columns(const Vec& m, int64_t cols, const std::vector<int32_t>& rows, int64_t col,
            int64_t width) {
  Vec out;
  for (int32_t r : rows)
    for (int64_t c = 0; c < width; ++c) out.push_back(m[r * cols + col + c]);
  return out;
}

TEST_P(GdnTest, LevelsMatchPerPathRecurrence) {
  const auto& [dtype, tree, sh] = GetParam();
  const int Hk = sh.heads_k, Hv = sh.heads_v;
  const int64_t Dk = sh.dim_k, Dv = sh.dim_v, state_cols = int64_t(Hv) * Dk * Dv;
  std::mt19937 gen(uint32_t(tree.nodes.size() * 977 + Hk * 31 + Hv * 7 + Dk * 3 + Dv + int(dtype)));
  Stream s = build_stream(tree.nodes, tree.n_initial_slots, gen);
  const int64_t T = s.n_tokens();
  // q and k L2-normalised per head (as gdn_conv leaves them), then rounded to float; the
  // reference uses the rounded values.
  auto normalised = [&](int64_t heads, int64_t dim) {
    std::vector<float> m = random_floats(gen, T * heads * dim, -1, 1);
    for (int64_t r = 0; r < T * heads; ++r) {
      double sum_sq = 0;
      for (int64_t d = 0; d < dim; ++d) sum_sq += double(m[r * dim + d]) * m[r * dim + d];
      for (int64_t d = 0; d < dim; ++d)
        m[r * dim + d] = float(m[r * dim + d] / std::sqrt(sum_sq + 1e-6));
    }
    return m;
  };
  const auto q = normalised(Hk, Dk), k = normalised(Hk, Dk);
  const auto v = random_floats(gen, T * Hv * Dv, -1, 1);
  const auto g = random_floats(gen, T * Hv, -0.6, 0);  // per-step decay exp(g) in [0.55, 1]
  const auto beta = random_floats(gen, T * Hv, 0, 1);
  const auto state0 = slots_with_poison(gen, s, tree.n_initial_slots, state_cols, -1, 1);

  // Reference: each node's path from the root's initial state (or zeros).
  Vec ref(size_t(T * Hv * Dv));
  std::vector<std::pair<int, Vec>> ref_states;  // (slot, final state of the node's path)
  const Vec qd = widen(q), kd = widen(k), vd = widen(v), gd = widen(g), bd = widen(beta);
  for (int n = 0; n < int(s.nodes.size()); ++n) {
    const std::vector<int32_t> rows = path_rows(s, n);
    const int64_t L = int64_t(rows.size()), len = s.nodes[n].length;
    const int root = root_of(s, n);
    Vec final_state(static_cast<size_t>(state_cols));
    for (int j = 0; j < Hv; ++j) {
      const int kh = j / (Hv / Hk);
      Vec S(size_t(Dk * Dv), 0.0);
      if (s.nodes[root].slot_in >= 0)
        for (int64_t i = 0; i < Dk * Dv; ++i)
          S[i] = state0[s.nodes[root].slot_in * state_cols + j * Dk * Dv + i];
      Vec o(size_t(L * Dv));
      recurrence_ref(columns(qd, Hk * Dk, rows, kh * Dk, Dk),
                     columns(kd, Hk * Dk, rows, kh * Dk, Dk),
                     columns(vd, Hv * Dv, rows, j * Dv, Dv), columns(gd, Hv, rows, j, 1),
                     columns(bd, Hv, rows, j, 1), L, Dk, Dv, S, o.data(), Dv);
      for (int64_t i = 0; i < len; ++i)
        for (int64_t d = 0; d < Dv; ++d)
          ref[(s.nodes[n].offset + i) * Hv * Dv + j * Dv + d] = o[(L - len + i) * Dv + d];
      std::copy(S.begin(), S.end(), final_state.begin() + j * Dk * Dv);
    }
    if (s.nodes[n].slot_out >= 0) ref_states.emplace_back(s.nodes[n].slot_out, final_state);
  }

  // f32: the state carries rounding across up to a few hundred steps and the chunked form
  // solves a unit-triangular system per chunk (forward substitution over up to 64 rows);
  // errors land around 4e-6, so 2e-5.
  const double tolerance = tol(dtype, 2e-5);
  Vec outputs[2], states[2];
  for (GdnForm form : {GdnForm::GdnForm_recurrent, GdnForm::GdnForm_chunked}) {
    const int f = form == GdnForm::GdnForm_chunked;
    const std::string label = f ? "gdn chunked" : "gdn recurrent";
    Device dev(dtype);
    dev.ops().set_stream(s);
    View qv = dev.put(T, Hk * Dk, q), kv = dev.put(T, Hk * Dk, k), vv = dev.put(T, Hv * Dv, v);
    View gv = dev.put(T, Hv, g), bv = dev.put(T, Hv, beta);
    View state = dev.put(s.n_slots, state_cols, state0);
    View out = dev.poison(T, Hv * Dv);
    for (int level = 0; level < s.n_levels(); ++level)
      dev.ops().gdn(qv, kv, vv, gv, bv, state, out, level, Hk, Hv, int(Dk), int(Dv), form);
    outputs[f] = dev.get(out);
    states[f] = dev.get(state);
    expect_close(label, dtype, outputs[f], ref, tolerance, tree.name);
    for (const auto& [slot, expected] : ref_states) {
      const Vec got(states[f].begin() + slot * state_cols,
                    states[f].begin() + (slot + 1) * state_cols);
      expect_close(label + " state", dtype, got, expected, tolerance,
                   tree.name + " slot " + std::to_string(slot));
    }
  }
  // The two forms agree with each other as closely as with the reference, outputs and every
  // slot written (states[*] also holds the untouched initial slots, equal on both sides).
  expect_close("gdn chunked vs recurrent", dtype, outputs[1], outputs[0], tolerance, tree.name);
  if (!ref_states.empty())
    for (const auto& [slot, expected] : ref_states) {
      const Vec a(states[0].begin() + slot * state_cols,
                  states[0].begin() + (slot + 1) * state_cols);
      const Vec b(states[1].begin() + slot * state_cols,
                  states[1].begin() + (slot + 1) * state_cols);
      expect_close("gdn chunked vs recurrent state", dtype, b, a, tolerance, tree.name);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Trees, GdnTest,
    ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                       ::testing::ValuesIn(tree_cases()),
                       ::testing::Values(GdnShape{1, 1, 8, 8}, GdnShape{2, 4, 16, 12},
                                         GdnShape{1, 3, 5, 7}, GdnShape{2, 2, 32, 32})),
    [](const auto& info) {
      const GdnShape h = std::get<2>(info.param);
      return dtype_label(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name + "_k" +
             std::to_string(h.heads_k) + "v" + std::to_string(h.heads_v) + "_" +
             std::to_string(h.dim_k) + "x" + std::to_string(h.dim_v);
    });

// ---- gated RMSNorm ----

class GatedNormTest : public ::testing::TestWithParam<std::tuple<DType, int, int>> {};

TEST_P(GatedNormTest, NormThenGate) {
  const auto [dtype, rows, dim] = GetParam();
  std::mt19937 gen(fresh_seed(uint32_t(rows * 17 + dim + int(dtype))));
  const auto o = random_floats(gen, rows * dim, -2, 1), z = random_floats(gen, rows * dim, -8, 8);
  const auto w = random_floats(gen, dim, -1.5, 1.5);
  const double eps = 1e-6;
  Device dev(dtype);
  View out = dev.poison(rows, dim);
  dev.ops().gated_rmsnorm(dev.put(rows, dim, o), dev.put(rows, dim, z), dev.put(1, dim, w), out,
                          eps);
  Vec ref;
  for (int r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (int d = 0; d < dim; ++d) sum_sq += double(o[r * dim + d]) * o[r * dim + d];
    const double inv = 1.0 / std::sqrt(sum_sq / dim + eps);
    for (int d = 0; d < dim; ++d)
      ref.push_back(w[d] * (o[r * dim + d] * inv) * silu_ref(z[r * dim + d]));
  }
  expect_close("gated_rmsnorm", dtype, dev.get(out), ref, tol(dtype));
}

// Ops' default z_gated_rmsnorm: the gate z = h . w_z^T, then the norm per head of dim columns.
TEST_P(GatedNormTest, GateProductThenNorm) {
  const auto [dtype, rows, dim] = GetParam();
  constexpr int kHeads = 3, K = 7;
  const int vd = kHeads * dim;
  std::mt19937 gen(fresh_seed(uint32_t(rows * 19 + dim + int(dtype))));
  const auto o = random_floats(gen, rows * vd, -2, 1), h = random_floats(gen, rows * K, -2, 2);
  const auto wz = random_floats(gen, vd * K, -1, 1), w = random_floats(gen, dim, -1.5, 1.5);
  const double eps = 1e-6;
  Device dev(dtype);
  View out = dev.poison(rows, vd);
  dev.ops().z_gated_rmsnorm(dev.put(rows, vd, o), dev.put(rows, K, h), dev.put(vd, K, wz),
                            dev.put(1, dim, w), out, eps);
  Vec ref;
  for (int r = 0; r < rows; ++r)
    for (int head = 0; head < kHeads; ++head) {
      const float* oh = &o[r * vd + head * dim];
      double sum_sq = 0;
      for (int d = 0; d < dim; ++d) sum_sq += double(oh[d]) * oh[d];
      const double inv = 1.0 / std::sqrt(sum_sq / dim + eps);
      for (int d = 0; d < dim; ++d) {
        double z = 0;
        for (int k = 0; k < K; ++k) z += double(h[r * K + k]) * wz[(head * dim + d) * K + k];
        ref.push_back(w[d] * (oh[d] * inv) * silu_ref(z));
      }
    }
  expect_close("z_gated_rmsnorm", dtype, dev.get(out), ref, tol(dtype));
}

INSTANTIATE_TEST_SUITE_P(Grid, GatedNormTest,
                         ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                                            ::testing::Values(1, 33, 130),
                                            ::testing::Values(1, 7, 128)),
                         [](const auto& info) {
                           return dtype_label(std::get<0>(info.param)) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "x" +
                                  std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace flide::test
