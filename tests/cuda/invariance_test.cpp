// Batch invariance of the GPU's tree kernels: a tree's rows come out with the same bits whether
// it runs alone in a round or first among 40 trees, as the server packs concurrent requests.
// The delta rule's state kernel walks a level's (node, head, 64 value columns) items in a
// grid-stride loop: a few for the lone tree's trunk, hundreds for 41 trunks, each block's item
// at another place in the walk; attention sees the tree at other stream offsets. Neither may
// change a row's arithmetic. cuBLASLt picks its algorithm by row count: in
// batch-invariant mode gemm.cpp pins it below CudaOps::kGemmPinRows rows, and the GEMMs' rows
// are checked across row counts in that mode.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <utility>

#include "backend/cuda/cuda_ops.h"
#include "cuda_test_util.h"
#include "kernels/dense.h"

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

// (Dk, Dv): the real models' heads, and a small one on the same kernel's zero-padded tiles.
class CudaInvariance : public CudaTestWithParam<std::pair<int, int>> {};

TEST_P(CudaInvariance, DeltaRuleRowsAndStateIgnoreTheRestOfTheRound) {
  const int Hk = 2, Hv = 4, Dk = GetParam().first, Dv = GetParam().second;
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

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaInvariance,
                         ::testing::Values(std::pair{128, 128}, std::pair{24, 24}),
                         [](const auto& info) {
                           return cat(info.param.first, "x", info.param.second);
                         });

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

// The out rows (the last layer's readout; at hd 256 each tile's keys split over CTAs,
// kernels::AttentionSplit): the last rows of the tree's three questions, alone and among 39 trees
// whose questions' last rows are out rows too.
TEST_P(CudaAttentionInvariance, OutRowsIgnoreTheRestOfTheRound) {
  const int hd = GetParam(), hq = 8, hkv = 2;
  const int64_t Cq = int64_t(hq) * hd, Ckv = int64_t(hkv) * hd;
  std::mt19937 gen{uint32_t(hd + 1)};
  const int64_t n = 304;
  const auto k = random_floats(gen, n * Ckv, -2, 2), v = random_floats(gen, n * Ckv, -1, 1);
  const auto q = random_floats(gen, 3 * Cq, -2, 2);
  auto run = [&](int others) {
    Stream s = build_stream(round_spec(others, gen), 0, gen);
    for (int node = s.level_begin[1]; node < s.level_begin[2]; ++node)  // the tree's first
      s.out_rows.push_back(s.nodes[node].offset + s.nodes[node].length - 1);
    const std::vector<int32_t> rows = tree_rows(s);
    const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size());
    Pair p;
    p.set_stream(s);
    std::vector<float> q_out = random_floats(gen, R * Cq, -2, 2);
    std::copy(q.begin(), q.end(), q_out.begin());
    const View qv = p.put(R, Cq, q_out).gpu;
    const View kv = p.put(T, Ckv, place(k, rows, T, Ckv, gen, -2, 2)).gpu;
    const View vv = p.put(T, Ckv, place(v, rows, T, Ckv, gen, -1, 1)).gpu;
    const auto out = p.poison(R, Cq);
    p.gpu().attention(qv, kv, vv, out.gpu, Rows::Rows_out, hq, hkv, hd, 1.0 / std::sqrt(hd));
    const Vec got = p.got(out);
    return Vec(got.begin(), got.begin() + 3 * Cq);
  };
  const Vec alone = run(0), among = run(kOthers);
  EXPECT_TRUE(all_finite(alone)) << "rows not written";
  expect_exact(cat("attention hd ", hd, " out rows, alone vs among 40 trees"), among, alone);
}

// 128: the mma.sync kernel; 256: the wgmma one (attention_wgmma.cu).
INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionInvariance, ::testing::Values(128, 256),
                         [](const auto& info) { return cat("hd", info.param); });

// The (N, K) of every GEMM of the 0.8B and 4B models (shared/configs), out rows in bf16.
struct GemmNK {
  int64_t N, K;
};
constexpr GemmNK kModelGemms[] = {
    // 0.8B: qkv, a|b, z, GDN out, q|gate, k and v, o, gate and up, down
    {6144, 1024},
    {32, 1024},
    {2048, 1024},
    {1024, 2048},
    {4096, 1024},
    {512, 1024},
    {3584, 1024},
    {1024, 3584},
    // 4B: the same roles (q|gate has qkv's shape, k and v are 1024 wide)
    {8192, 2560},
    {64, 2560},
    {4096, 2560},
    {2560, 4096},
    {1024, 2560},
    {9216, 2560},
    {2560, 9216}};

class CudaGemmInvariance : public CudaTestWithParam<GemmNK> {};
class CudaSwigluInvariance : public CudaTest {};

// In batch-invariant mode, a row's bits may not depend on how many rows share its GEMM: a
// server's round holds 18 read rows per QuALITY request in the last layer and 6,260 token rows
// per request elsewhere. The first rows are the same at every row count and the other rows
// random; every count's first rows must equal those of the largest count, for matmul and
// matmul_add.
TEST_P(CudaGemmInvariance, RowsIgnoreTheRowCount) {
  const auto [N, K] = GetParam();
  constexpr int64_t kMax = 25040, kFirst = 18;
  const int64_t counts[] = {1,    kFirst, 72,  144, 1152, 2047, CudaOps::kGemmPinRows,
                            3001, 6325,   kMax};
  std::mt19937 gen{uint32_t(N * 7 + K)};
  std::unique_ptr<Ops> ops = make_cuda_ops(0, /*batch_invariant=*/true);
  const View x = ops->alloc(kMax, K), w = ops->alloc(N, K), out = ops->alloc(kMax, N);
  ops->upload(x, rounded_bf16(random_floats(gen, kMax * K, -1, 1)).data());
  ops->upload(w, rounded_bf16(random_floats(gen, N * K, -0.05, 0.05)).data());
  const std::vector<float> acc = rounded_bf16(random_floats(gen, kMax * N, -2, 2));
  const std::vector<float> nan(size_t(kMax * N), std::numeric_limits<float>::quiet_NaN());
  for (const bool add : {false, true}) {
    auto first_rows = [&](int64_t M) {
      ops->upload(out, add ? acc.data() : nan.data());
      const View o = out.first_rows(M);
      if (add)
        ops->matmul_add(x.first_rows(M), w, o);
      else
        ops->matmul(x.first_rows(M), w, o);
      Vec got(size_t(std::min(M, kFirst) * N));
      ops->download(out.first_rows(std::min(M, kFirst)), got.data());
      return got;
    };
    const Vec all = first_rows(kMax);
    ASSERT_TRUE(all_finite(all)) << "rows not written";
    for (const int64_t M : counts) {
      const Vec got = first_rows(M);
      expect_exact(cat(add ? "matmul_add" : "matmul", " N ", N, " K ", K), got,
                   Vec(all.begin(), all.begin() + int64_t(got.size())),
                   cat(M, " rows against ", kMax));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ModelShapes, CudaGemmInvariance, ::testing::ValuesIn(kModelGemms),
                         [](const auto& info) {
                           return cat("N", info.param.N, "_K", info.param.K);
                         });

// The fused SwiGLU GEMM (kernels::swiglu_gemm, the MLP of the 0.8B model) has no plans to pin: a
// row's bits may depend neither on how many rows share the GEMM nor on the tile (and CTA of the
// cluster) its row lands in. The first rows are the same at every row count and appear again
// at rows 5,056-5,073 (tile 39: the other CTA of a row pair and the other warpgroup than rows
// 0-17 in tile 0).
TEST_F(CudaSwigluInvariance, RowsIgnoreTheRowCountAndTheirPlace) {
  constexpr int64_t N = 3584, K = 1024, kMax = 25040, kFirst = 18, kAgain = 5056;
  std::mt19937 gen{std::random_device{}()};
  std::unique_ptr<Ops> ops = make_cuda_ops(0, /*batch_invariant=*/true);
  std::vector<float> xs = rounded_bf16(random_floats(gen, kMax * K, -1, 1));
  std::copy(xs.begin(), xs.begin() + kFirst * K, xs.begin() + kAgain * K);
  const View x = ops->alloc(kMax, K), wg = ops->alloc(N, K), wu = ops->alloc(N, K),
             out = ops->alloc(kMax, N);
  ops->upload(x, xs.data());
  ops->upload(wg, rounded_bf16(random_floats(gen, N * K, -0.06, 0.06)).data());
  ops->upload(wu, rounded_bf16(random_floats(gen, N * K, -0.06, 0.06)).data());
  ASSERT_TRUE(kernels::swiglu_gemm_supported(x.data, wg.data, wu.data, out.data, N, K));
  const std::vector<float> nan(size_t(kMax * N), std::numeric_limits<float>::quiet_NaN());
  auto rows = [&](int64_t M, int64_t from) {  // out rows [from, from + kFirst) of M rows
    ops->upload(out, nan.data());
    ops->swiglu(x.first_rows(M), wg, wu, out.first_rows(M));
    const int64_t n = std::min(M, from + kFirst) - from;
    Vec got(size_t(n * N));
    ops->download(rows_from(out, from).first_rows(n), got.data());
    return got;
  };
  const Vec first = rows(kMax, 0);
  ASSERT_TRUE(all_finite(first)) << "rows not written";
  expect_exact("swiglu", rows(kMax, kAgain), first, cat("rows ", kAgain, "+ against rows 0+"));
  for (const int64_t M : {int64_t(1), kFirst, int64_t(72), int64_t(129), int64_t(6325)}) {
    const Vec got = rows(M, 0);
    expect_exact("swiglu", got, Vec(first.begin(), first.begin() + int64_t(got.size())),
                 cat(M, " rows against ", kMax));
  }
}

// Under --quantization fp8 the down and out projections read their input as FP8 blocks, written
// by the fused kernel that makes it (Ops::swiglu_into_product here), through cuBLASLt's
// block-scaled plans, pinned as the bf16 ones are: a row's bits may not depend on the row count
// either. (N, K): the projection's, for the 0.8B and 4B models; the SwiGLU's input is 1,024 wide.
class CudaFp8BlocksInvariance : public CudaTestWithParam<GemmNK> {};

TEST_P(CudaFp8BlocksInvariance, RowsIgnoreTheRowCount) {
  const auto [N, K] = GetParam();
  constexpr int64_t kIn = 1024, kMax = 25040, kFirst = 18;
  const int64_t counts[] = {1, kFirst, 144, 2047, CudaOps::kGemmPinRows, 3001, 6325};
  std::mt19937 gen{uint32_t(N * 5 + K)};
  std::unique_ptr<Ops> ops =
      make_cuda_ops(0, /*batch_invariant=*/true, Quantization::Quantization_fp8);
  const View x = ops->alloc(kMax, kIn), wg = ops->alloc(K, kIn), wu = ops->alloc(K, kIn),
             w = ops->alloc(N, K), act = ops->alloc(kMax, K), out = ops->alloc(kMax, N);
  ops->upload(x, rounded_bf16(random_floats(gen, kMax * kIn, -1, 1)).data());
  for (const View& wi : {wg, wu})
    ops->upload(wi, rounded_bf16(random_floats(gen, K * kIn, -0.06, 0.06)).data());
  ops->upload(w, rounded_bf16(random_floats(gen, N * K, -0.05, 0.05)).data());
  ops->quantize_weight(wg);
  ops->quantize_weight(wu);
  ops->quantize_output_weight(w);
  const std::vector<float> acc = rounded_bf16(random_floats(gen, kMax * N, -2, 2));
  auto first_rows = [&](int64_t M) {
    ops->upload(out, acc.data());
    ops->swiglu_into_product(x.first_rows(M), wg, wu, act.first_rows(M), w);
    ops->matmul_add(act.first_rows(M), w, out.first_rows(M));
    Vec got(size_t(std::min(M, kFirst) * N));
    ops->download(out.first_rows(std::min(M, kFirst)), got.data());
    return got;
  };
  const Vec all = first_rows(kMax);
  ASSERT_TRUE(all_finite(all));
  ASSERT_NE(all, Vec(acc.begin(), acc.begin() + kFirst * N)) << "the product added nothing";
  for (const int64_t M : counts) {
    const Vec got = first_rows(M);
    expect_exact(cat("matmul_add on FP8 blocks N ", N, " K ", K), got,
                 Vec(all.begin(), all.begin() + int64_t(got.size())),
                 cat(M, " rows against ", kMax));
  }
}

constexpr GemmNK kFp8BlockGemms[] = {{1024, 3584}, {1024, 2048}, {2560, 9216}, {2560, 4096}};
INSTANTIATE_TEST_SUITE_P(ModelShapes, CudaFp8BlocksInvariance, ::testing::ValuesIn(kFp8BlockGemms),
                         [](const auto& info) {
                           return cat("N", info.param.N, "_K", info.param.K);
                         });

}  // namespace
}  // namespace flide::test
