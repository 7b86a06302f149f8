// Gated-attention ops against float64 loops: the query side (per-head split, norm with weight
// 1 + w, partial NeoX RoPE), the key side (norm, RoPE) and tree attention. The tree-attention
// reference is the definition of the visibility rule: for every node, its root-to-node path is
// concatenated into one sequence and run through plain causal attention; the node's rows of that
// result must equal the backend's rows of the flat stream.
#include <cmath>
#include <random>
#include <tuple>

#include "ops_test_util.h"

namespace flide::test {
namespace {

// ---- query and key sides, and attention, over tree streams ----

struct HeadShape {
  int heads_q, heads_kv, head_dim, rot_dim;
};

class TreeAttentionTest : public ::testing::TestWithParam<std::tuple<DType, TreeCase, HeadShape>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  const TreeCase& tree() const { return std::get<1>(GetParam()); }
  const HeadShape& heads() const { return std::get<2>(GetParam()); }
  std::mt19937 rng(int salt) const {
    const HeadShape& h = heads();
    return std::mt19937(
        fresh_seed(uint32_t(salt * 7919 + tree().nodes.size() * 131 + h.heads_q * 17 +
                            h.heads_kv * 5 + h.head_dim + int(dtype()))));
  }
};

// Rotates the first rot_dim dims of each head of a [rows, heads * hd] matrix in place.
void rope_ref(Vec& x, const std::vector<int32_t>& positions, int heads, int hd, int rot_dim,
              double theta) {
  const int half = rot_dim / 2;
  for (size_t r = 0; r < positions.size(); ++r)
    for (int h = 0; h < heads; ++h) {
      double* xh = x.data() + (r * heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        const double angle = positions[r] / std::pow(theta, 2.0 * i / rot_dim);
        const double x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        xh[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
    }
}

// RMS norm with weight 1 + w of every hd-wide head of x, in place.
void head_norm_ref(Vec& x, const Vec& w, int hd, double eps) {
  for (size_t h0 = 0; h0 < x.size(); h0 += size_t(hd)) {
    double sum_sq = 0;
    for (int d = 0; d < hd; ++d) sum_sq += x[h0 + d] * x[h0 + d];
    const double s = 1.0 / std::sqrt(sum_sq / hd + eps);
    for (int d = 0; d < hd; ++d) x[h0 + d] *= s * (1.0 + w[size_t(d)]);
  }
}

TEST_P(TreeAttentionTest, QueryAndKeySides) {
  const HeadShape& hs = heads();
  const int hd = hs.head_dim;
  const double eps = 1e-6;
  for (double theta : {10000.0, 1e7}) {
    auto gen = rng(1 + int(theta > 1e5));
    Stream s = build_stream(tree().nodes, tree().n_initial_slots, gen);
    s.out_rows = pick_out_rows(s, gen, 0.2);
    const int64_t T = s.n_tokens(), width = int64_t(hs.heads_q) * hd;
    const int64_t k_width = int64_t(hs.heads_kv) * hd;
    const auto qg = random_floats(gen, T * 2 * width, -1, 1);
    const auto k = random_floats(gen, T * k_width, -1, 1);
    const auto w = random_floats(gen, hd, -0.5, 0.5);
    int max_pos = 0;
    for (int32_t p : s.positions) max_pos = std::max(max_pos, int(p));
    // f32: HF forms the angle pos * inv_freq in fp32, so its error grows like pos * 2^-24 and
    // so does the rotated value's (normed values of a few units); the tolerance follows the
    // largest position.
    const double tolerance = tol(dtype(), kTolF32 + max_pos * 1e-6);
    for (Rows which : {Rows::Rows_all, Rows::Rows_out}) {
      const bool all = which == Rows::Rows_all;
      std::vector<int32_t> rows = s.out_rows;
      if (all) {
        rows.clear();
        for (int32_t t = 0; t < T; ++t) rows.push_back(t);
      }
      const Vec qg_rows = gather(widen(qg), 2 * width, rows);
      Vec ref_q, ref_gate;
      for (size_t h0 = 0; h0 < qg_rows.size(); h0 += size_t(2 * hd)) {
        ref_q.insert(ref_q.end(), qg_rows.begin() + h0, qg_rows.begin() + h0 + hd);
        ref_gate.insert(ref_gate.end(), qg_rows.begin() + h0 + hd, qg_rows.begin() + h0 + 2 * hd);
      }
      std::vector<int32_t> positions;
      for (int32_t r : rows) positions.push_back(s.positions[r]);
      head_norm_ref(ref_q, widen(w), hd, eps);
      rope_ref(ref_q, positions, hs.heads_q, hd, hs.rot_dim, theta);

      const int64_t R = int64_t(rows.size());
      Device dev(dtype());
      dev.ops().set_stream(s);
      View q = dev.poison(R, width), gate = dev.poison(R, width);
      dev.ops().attention_query(
          dev.put(R, 2 * width, std::vector<float>(qg_rows.begin(), qg_rows.end())),
          dev.put(1, hd, w), q, gate, which, hs.heads_q, hd, hs.rot_dim, theta, eps);
      const std::string where = tree().name + (all ? " all" : " out");
      expect_close("attention_query", dtype(), dev.get(q), ref_q, tolerance, where);
      EXPECT_EQ(rel_err(dev.get(gate), ref_gate), 0.0) << where;
    }

    Vec ref_k = widen(k);
    head_norm_ref(ref_k, widen(w), hd, eps);
    rope_ref(ref_k, s.positions, hs.heads_kv, hd, hs.rot_dim, theta);
    Device dev(dtype());
    dev.ops().set_stream(s);
    View kv = dev.put(T, k_width, k);
    dev.ops().attention_key(kv, dev.put(1, hd, w), hs.heads_kv, hd, hs.rot_dim, theta, eps);
    expect_close("attention_key", dtype(), dev.get(kv), ref_k, tolerance, tree().name);
  }
}

// Plain causal attention over one sequence: q [L, hq*hd], k/v [L, hkv*hd] -> [L, hq*hd].
Vec causal_attention(const Vec& q, const Vec& k, const Vec& v, int64_t L, int hq, int hkv, int hd,
                     double scale) {
  Vec out(size_t(L * hq * hd), 0.0);
  std::vector<double> p(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i)
    for (int h = 0; h < hq; ++h) {
      const int kvh = h / (hq / hkv);
      double max_score = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += q[(i * hq + h) * hd + d] * k[(j * hkv + kvh) * hd + d];
        p[j] = dot * scale;
        max_score = std::max(max_score, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - max_score);
      for (int64_t j = 0; j <= i; ++j)
        for (int d = 0; d < hd; ++d)
          out[(i * hq + h) * hd + d] += p[j] / sum * v[(j * hkv + kvh) * hd + d];
    }
  return out;
}

TEST_P(TreeAttentionTest, VisibilityMatchesPerPathAttention) {
  const HeadShape& hs = heads();
  auto gen = rng(3);
  Stream s = build_stream(tree().nodes, tree().n_initial_slots, gen);
  s.out_rows = pick_out_rows(s, gen, 0.1);
  const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size());
  const int64_t wq = int64_t(hs.heads_q) * hs.head_dim, wkv = int64_t(hs.heads_kv) * hs.head_dim;
  // Scores of a few units, so that softmax is neither flat nor one-hot.
  const auto q = random_floats(gen, T * wq, -1.5, 1.5);
  const auto k = random_floats(gen, T * wkv, -1.5, 1.5);
  const auto v = random_floats(gen, T * wkv, -1, 1);
  const double scale = 1.0 / std::sqrt(double(hs.head_dim));

  // Reference: every node's rows from the attention over its concatenated path.
  const Vec qd = widen(q), kd = widen(k), vd = widen(v);
  Vec ref_all(size_t(T * wq));
  for (int n = 0; n < int(s.nodes.size()); ++n) {
    const std::vector<int32_t> rows = path_rows(s, n);
    const int64_t L = int64_t(rows.size()), len = s.nodes[n].length;
    const Vec out =
        causal_attention(gather(qd, wq, rows), gather(kd, wkv, rows), gather(vd, wkv, rows), L,
                         hs.heads_q, hs.heads_kv, hs.head_dim, scale);
    for (int64_t i = 0; i < len; ++i)
      std::copy_n(out.begin() + (L - len + i) * wq, wq,
                  ref_all.begin() + (s.nodes[n].offset + i) * wq);
  }

  Device dev(dtype());
  dev.ops().set_stream(s);
  View kv = dev.put(T, wkv, k), vv = dev.put(T, wkv, v);
  View out_all = dev.poison(T, wq);
  dev.ops().attention(dev.put(T, wq, q), kv, vv, out_all, Rows::Rows_all, hs.heads_q, hs.heads_kv,
                      hs.head_dim, scale);
  expect_close("attention", dtype(), dev.get(out_all), ref_all, tol(dtype()), tree().name + " all");

  // Selective readout: queries only at out rows (in any order).
  std::vector<float> q_out;
  for (int32_t r : s.out_rows)
    q_out.insert(q_out.end(), q.begin() + r * wq, q.begin() + (r + 1) * wq);
  View out_sel = dev.poison(R, wq);
  dev.ops().attention(dev.put(R, wq, q_out), kv, vv, out_sel, Rows::Rows_out, hs.heads_q,
                      hs.heads_kv, hs.head_dim, scale);
  expect_close("attention", dtype(), dev.get(out_sel), gather(ref_all, wq, s.out_rows),
               tol(dtype()), tree().name + " out");
}

INSTANTIATE_TEST_SUITE_P(
    Trees, TreeAttentionTest,
    ::testing::Combine(::testing::Values(DType::DType_f32, DType::DType_f64),
                       ::testing::ValuesIn(tree_cases()),
                       ::testing::Values(HeadShape{1, 1, 2, 2}, HeadShape{4, 2, 16, 8},
                                         HeadShape{3, 1, 7, 4}, HeadShape{2, 2, 32, 32})),
    [](const auto& info) {
      const HeadShape h = std::get<2>(info.param);
      return dtype_label(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name + "_q" +
             std::to_string(h.heads_q) + "kv" + std::to_string(h.heads_kv) + "d" +
             std::to_string(h.head_dim) + "r" + std::to_string(h.rot_dim);
    });

}  // namespace
}  // namespace flide::test
