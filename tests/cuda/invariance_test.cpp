// Batch invariance of the GPU's tree kernels: a tree's rows come out with the same bits whether
// it runs alone in a round or first among 40 trees, as the server packs concurrent requests.
// The delta rule's state kernel gives a level with few nodes finer head splits (gdn_state.cu:
// 8 blocks per head for the lone tree's trunk, one for 40 trunks), and attention sees the tree
// at other stream offsets; neither may change a row's arithmetic. (GEMMs are not covered: cuBLAS
// picks its algorithm by row count.)
#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_test_util.h"

namespace flide::test {
namespace {

constexpr int kOthers = 39;

// The tree under test (a trunk and three questions) first, then `others` random trees.
std::vector<NodeSpec> round_spec(int others, std::mt19937& gen) {
  std::vector<NodeSpec> spec{{-1, 200}, {0, 70}, {0, 33}, {0, 1}};
  std::uniform_int_distribution<int> trunk(1, 150), question(1, 90), questions(1, 2);
  for (int t = 0; t < others; ++t) {
    const int root = int(spec.size());
    spec.push_back({-1, trunk(gen)});
    for (int q = questions(gen); q > 0; --q) spec.push_back({root, question(gen)});
  }
  return spec;
}

// Stream rows of the tree under test, node by node: its trunk is the first root, its questions
// the first three nodes of level 1 (build_stream keeps spec order within a level).
std::vector<int32_t> tree_rows(const Stream& s) {
  std::vector<int32_t> rows;
  for (int n : {0, s.level_begin[1], s.level_begin[1] + 1, s.level_begin[1] + 2})
    for (int32_t t = 0; t < s.nodes[n].length; ++t) rows.push_back(s.nodes[n].offset + t);
  return rows;
}

// A [T, cols] input whose tree rows hold `tree` (rows in tree_rows order) and whose other rows
// are random.
std::vector<float> place(const std::vector<float>& tree, const std::vector<int32_t>& rows,
                         int64_t T, int64_t cols, std::mt19937& gen, double lo, double hi) {
  std::vector<float> host = random_floats(gen, T * cols, lo, hi);
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy(tree.begin() + int64_t(i) * cols, tree.begin() + int64_t(i + 1) * cols,
              host.begin() + int64_t(rows[i]) * cols);
  return host;
}

// expect_exact takes NaN for NaN: a row neither round wrote would pass without this.
bool all_finite(const Vec& x) {
  return std::all_of(x.begin(), x.end(), [](double e) { return std::isfinite(e); });
}

class CudaInvariance : public CudaTest {};

TEST_F(CudaInvariance, DeltaRuleRowsAndStateIgnoreTheRestOfTheRound) {
  const int Hk = 2, Hv = 4, Dk = 128, Dv = 128;
  const int64_t Ck = int64_t(Hk) * Dk, Cv = int64_t(Hv) * Dv, S = int64_t(Hv) * Dk * Dv;
  std::mt19937 gen{2026};
  const int64_t n = 304;  // rows of the tree under test
  const auto q = random_floats(gen, n * Ck, -1, 1);
  const auto k = random_floats(gen, n * Ck, -1, 1);
  const auto v = random_floats(gen, n * Cv, -1, 1);
  const auto g = random_floats(gen, n * Hv, -0.6, -0.01);
  const auto beta = random_floats(gen, n * Hv, 0.05, 0.95);

  struct Result {
    Vec out, state;
  };
  auto run = [&](int others) {
    const Stream s = build_stream(round_spec(others, gen), 0, gen);
    const std::vector<int32_t> rows = tree_rows(s);
    EXPECT_EQ(int64_t(rows.size()), n);
    const int64_t T = s.n_tokens();
    Pair p;
    p.set_stream(s);
    Ops& ops = p.gpu();
    auto placed = [&](const std::vector<float>& tree, int64_t cols, double lo, double hi) {
      return place(tree, rows, T, cols, gen, lo, hi);
    };
    // q and k rows of unit norm throughout (the recurrence is contractive only then), normalised
    // after placing, identically for the tree's rows in both rounds.
    const View qv = p.put(T, Ck, unit_rows(placed(q, Ck, -1, 1), Dk)).gpu;
    const View kv = p.put(T, Ck, unit_rows(placed(k, Ck, -1, 1), Dk)).gpu;
    const View vv = p.put(T, Cv, placed(v, Cv, -1, 1)).gpu;
    const View gv = p.put(T, Hv, placed(g, Hv, -0.6, -0.01), true).gpu;
    const View bv = p.put(T, Hv, placed(beta, Hv, 0.05, 0.95), true).gpu;
    const auto state = p.poison(std::max(s.n_slots, 1), S, true), out = p.poison(T, Cv);
    for (int level = 0; level < s.n_levels(); ++level)
      ops.gdn(qv, kv, vv, gv, bv, state.gpu, out.gpu, level, Hk, Hv, Dk, Dv,
              GdnForm::GdnForm_chunked);
    const Vec slots = p.got(state);
    return Result{gather(p.got(out), Cv, rows), Vec(slots.begin(), slots.begin() + S)};
  };
  const Result alone = run(0), among = run(kOthers);
  EXPECT_TRUE(all_finite(alone.out) && all_finite(alone.state)) << "rows or state not written";
  expect_exact("gdn out, alone vs among 40 trees", among.out, alone.out);
  expect_exact("gdn trunk state, alone vs among 40 trees", among.state, alone.state);
}

class CudaAttentionInvariance : public CudaTestWithParam<int> {};

TEST_P(CudaAttentionInvariance, RowsIgnoreTheRestOfTheRound) {
  const int hd = GetParam(), hq = 8, hkv = 2;
  const int64_t Cq = int64_t(hq) * hd, Ckv = int64_t(hkv) * hd;
  std::mt19937 gen{uint32_t(hd)};
  const int64_t n = 304;
  const auto q = random_floats(gen, n * Cq, -2, 2), k = random_floats(gen, n * Ckv, -2, 2);
  const auto v = random_floats(gen, n * Ckv, -1, 1);
  auto run = [&](int others) {
    const Stream s = build_stream(round_spec(others, gen), 0, gen);
    const std::vector<int32_t> rows = tree_rows(s);
    const int64_t T = s.n_tokens();
    Pair p;
    p.set_stream(s);
    auto put = [&](const std::vector<float>& tree, int64_t cols, double lo, double hi) {
      return p.put(T, cols, place(tree, rows, T, cols, gen, lo, hi)).gpu;
    };
    const View qv = put(q, Cq, -2, 2), kv = put(k, Ckv, -2, 2), vv = put(v, Ckv, -1, 1);
    const auto out = p.poison(T, Cq);
    p.gpu().attention(qv, kv, vv, out.gpu, Rows::Rows_all, hq, hkv, hd, 1.0 / std::sqrt(hd));
    return gather(p.got(out), Cq, rows);
  };
  const Vec alone = run(0), among = run(kOthers);
  EXPECT_TRUE(all_finite(alone)) << "rows not written";
  expect_exact(cat("attention hd ", hd, ", alone vs among 40 trees"), among, alone);
}

// 128: the mma.sync kernel; 256: the wgmma one (attention_wgmma.cu).
INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionInvariance, ::testing::Values(128, 256),
                         [](const auto& info) { return cat("hd", info.param); });

}  // namespace
}  // namespace flide::test
