// Gated-attention ops on the CUDA backend against the CPU float64 backend: the query side (split,
// norm, partial NeoX RoPE; all rows and out rows), the key side, and tree attention over the shared
// tree shapes (roots, children, grandchildren; node lengths 1, 63, 64, 65, 130, 200) with head dims
// 16/24/32/64/128/256 and grouped KV heads, for every row (Rows_all, the plan over the whole
// stream) and for the out rows (Rows_out, the last layer's selective readout); and gated attention
// (the query side, attention and the output gate, the gate applied in the attention's store).
// On a stream padded to its capacity bucket, the ops over every row write zeros to the padding
// rows (backend/stream.h).
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "cuda_test_util.h"
#include "engine/round_capacity.h"
#include "kernels/dense.h"

namespace flide::test {
namespace {

// ---- the query and key sides: split, norm (weight 1 + w), RoPE in one kernel ----

struct SideShape {
  int heads, heads_kv, head_dim, rot_dim;
  double theta;
};
void PrintTo(const SideShape& s, std::ostream* os) {
  *os << "heads " << s.heads << "/" << s.heads_kv << " hd " << s.head_dim << " rot " << s.rot_dim
      << " theta " << s.theta;
}

class CudaAttentionSides : public CudaTestWithParam<SideShape> {};

// Positions reach ~500 (a root starts at 300): the fp32 angle pos * inv_freq carries ~3e-5 rad
// of rounding, far inside the bf16 output rounding that kTolBf16 is sized for. The gate halves
// are moved, not computed: they must come out exactly.
TEST_P(CudaAttentionSides, QueryAllRowsAndOutRowsAndKeys) {
  const auto [heads, heads_kv, hd, rot, theta] = GetParam();
  std::mt19937 gen{uint32_t(hd * 13 + rot + heads)};
  Stream s = build_stream(tree_cases()[3].nodes, 0, gen);
  s.out_rows = pick_out_rows(s, gen, 0.1);
  const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size()), C = int64_t(heads) * hd;
  const double eps = 1e-6;
  Pair p;
  p.set_stream(s);
  auto norm = p.put(1, hd, random_floats(gen, hd, -0.5, 0.5));
  for (Rows which : {Rows::Rows_all, Rows::Rows_out}) {
    const int64_t rows = which == Rows::Rows_all ? T : R;
    const std::string context =
        cat("hd ", hd, " rot ", rot, which == Rows::Rows_all ? " all rows" : " out rows");
    auto qg = p.put(rows, 2 * C, random_floats(gen, rows * 2 * C, -2, 2));
    auto q = p.poison(rows, C), gate = p.poison(rows, C);
    p.both([&](Ops& ops, auto v) {
      ops.attention_query(v(qg), v(norm), v(q), v(gate), which, heads, hd, rot, theta, eps);
    });
    expect_rms("attention_query", p.got(q), p.ref(q), kTolBf16, context);
    expect_exact("attention_query", p.got(gate), p.ref(gate), context + " gate");
  }
  const int64_t Ck = int64_t(heads_kv) * hd;
  auto k = p.put(T, Ck, random_floats(gen, T * Ck, -2, 2));
  p.both(
      [&](Ops& ops, auto v) { ops.attention_key(v(k), v(norm), heads_kv, hd, rot, theta, eps); });
  expect_rms("attention_key", p.got(k), p.ref(k), kTolBf16, cat("hd ", hd, " rot ", rot));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionSides,
    ::testing::Values(SideShape{3, 1, 16, 4, 1e4}, SideShape{3, 3, 24, 6, 1e6},
                      SideShape{1, 1, 12, 4, 1e4}, SideShape{4, 2, 32, 8, 1e7},
                      SideShape{2, 1, 32, 32, 1e4}, SideShape{3, 1, 64, 16, 1e7},
                      SideShape{8, 2, 256, 64, 1e7}, SideShape{9, 2, 256, 256, 1e7}),
    [](const auto& info) {
      return cat("h", info.param.heads, "_hd", info.param.head_dim, "_rot", info.param.rot_dim);
    });

// ---- tree attention ----

struct AttnShape {
  int heads_q, heads_kv, head_dim;
};
void PrintTo(const AttnShape& s, std::ostream* os) {
  *os << "heads " << s.heads_q << "/" << s.heads_kv << " hd " << s.head_dim;
}

class CudaAttention : public CudaTestWithParam<std::tuple<TreeCase, AttnShape>> {};

// Scores q.k * hd^-1/2 with q, k in [-2, 2): softmax weights from near-uniform to peaked, so
// both the max-subtraction and the long sums are exercised.
TEST_P(CudaAttention, AllRowsAndOutRows) {
  const auto& [tree, shape] = GetParam();
  const auto [hq, hkv, hd] = shape;
  std::mt19937 gen{uint32_t(tree.nodes.size() * 101 + hq * 17 + hkv * 5 + hd)};
  Stream s = build_stream(tree.nodes, tree.n_initial_slots, gen);
  s.out_rows = pick_out_rows(s, gen, 0.1);
  const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size());
  const int64_t Cq = int64_t(hq) * hd, Ckv = int64_t(hkv) * hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  Pair p;
  p.set_stream(s);
  auto k = p.put(T, Ckv, random_floats(gen, T * Ckv, -2, 2));
  auto v = p.put(T, Ckv, random_floats(gen, T * Ckv, -1, 1));
  const std::string context = cat(tree.name, " hq ", hq, " hkv ", hkv, " hd ", hd);

  auto q = p.put(T, Cq, random_floats(gen, T * Cq, -2, 2));
  auto out = p.poison(T, Cq);
  p.both([&](Ops& ops, auto side) {
    ops.attention(side(q), side(k), side(v), side(out), Rows::Rows_all, hq, hkv, hd, scale);
  });
  expect_rms(cat("attention hd ", hd), p.got(out), p.ref(out), kTolBf16, context + " all rows");

  auto qr = p.put(R, Cq, random_floats(gen, R * Cq, -2, 2));
  auto out_r = p.poison(R, Cq);
  p.both([&](Ops& ops, auto side) {
    ops.attention(side(qr), side(k), side(v), side(out_r), Rows::Rows_out, hq, hkv, hd, scale);
  });
  expect_rms(cat("attention hd ", hd), p.got(out_r), p.ref(out_r), kTolBf16, context + " out rows");
}

INSTANTIATE_TEST_SUITE_P(
    Trees, CudaAttention,
    ::testing::Combine(::testing::ValuesIn(tree_cases()),
                       ::testing::Values(AttnShape{4, 2, 16}, AttnShape{2, 2, 24},
                                         AttnShape{4, 1, 32}, AttnShape{3, 1, 64},
                                         AttnShape{8, 2, 128}, AttnShape{4, 1, 256})),
    [](const auto& info) {
      const AttnShape a = std::get<1>(info.param);
      return cat(std::get<0>(info.param).name, "_q", a.heads_q, "_kv", a.heads_kv, "_hd",
                 a.head_dim);
    });

// ---- gated attention: the query side, attention and the output gate ----

class CudaGatedAttention : public CudaTestWithParam<std::tuple<TreeCase, SideShape>> {};

// The query side without its gate copy and the attention with the gate in its store, for every
// head dim. Against the float64 reference: under kTolBf16 (the three ops' roundings). Against
// the GPU's three ops (attention_query, attention, sigmoid_mul): the same bits, for every row
// and for the out rows.
TEST_P(CudaGatedAttention, MatchesReferenceAndThreeOps) {
  const auto& [tree, shape] = GetParam();
  const auto [hq, hkv, hd, rot, theta] = shape;
  std::mt19937 gen{std::random_device{}()};
  Stream s = build_stream(tree.nodes, tree.n_initial_slots, gen);
  s.out_rows = pick_out_rows(s, gen, 0.1);
  const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size());
  const int64_t Cq = int64_t(hq) * hd, Ckv = int64_t(hkv) * hd;
  const double scale = 1.0 / std::sqrt(double(hd)), eps = 1e-6;
  Pair p;
  p.set_stream(s);
  Ops& gpu = p.gpu();
  auto norm = p.put(1, hd, random_floats(gen, hd, -0.5, 0.5));
  auto k = p.put(T, Ckv, random_floats(gen, T * Ckv, -2, 2));
  auto v = p.put(T, Ckv, random_floats(gen, T * Ckv, -1, 1));
  for (Rows which : {Rows::Rows_all, Rows::Rows_out}) {
    const int64_t rows = which == Rows::Rows_all ? T : R;
    const std::string context = cat(tree.name, " hq ", hq, " hkv ", hkv, " hd ", hd, " rot ", rot,
                                    which == Rows::Rows_all ? " all rows" : " out rows");
    auto qg = p.put(rows, 2 * Cq, random_floats(gen, rows * 2 * Cq, -2, 2));
    auto out = p.poison(rows, Cq);
    const auto ran = ops_run(gpu, [&] {
      gpu.gated_attention(qg.gpu, norm.gpu, k.gpu, v.gpu, out.gpu, which, hq, hkv, hd, rot, theta,
                          eps, scale);
    });
    EXPECT_EQ(ran, std::set<std::string>{"gated_attention"}) << context;
    p.cpu().gated_attention(qg.cpu, norm.cpu, k.cpu, v.cpu, out.cpu, which, hq, hkv, hd, rot, theta,
                            eps, scale);
    expect_rms("gated_attention", p.got(out), p.ref(out), kTolBf16, context);
    View q = gpu.alloc(rows, Cq), gate = gpu.alloc(rows, Cq), three = gpu.alloc(rows, Cq);
    gpu.attention_query(qg.gpu, norm.gpu, q, gate, which, hq, hd, rot, theta, eps);
    gpu.attention(q, k.gpu, v.gpu, three, which, hq, hkv, hd, scale);
    gpu.sigmoid_mul(three, gate);
    expect_exact("gated_attention (fused against three ops)", p.got(out), p.got(three), context);
    View gated = gpu.alloc(rows, Cq);
    gpu.attention_gated(q, gate, k.gpu, v.gpu, gated, which, hq, hkv, hd, scale);
    expect_exact("attention_gated against attention and sigmoid_mul", p.got(gated), p.got(three),
                 context);
  }
}

INSTANTIATE_TEST_SUITE_P(Trees, CudaGatedAttention,
                         ::testing::Combine(::testing::ValuesIn(tree_cases()),
                                            ::testing::Values(SideShape{8, 2, 256, 64, 1e7},
                                                              SideShape{4, 1, 256, 256, 1e4},
                                                              SideShape{4, 2, 64, 16, 1e7})),
                         [](const auto& info) {
                           const SideShape a = std::get<1>(info.param);
                           return cat(std::get<0>(info.param).name, "_q", a.heads, "_kv",
                                      a.heads_kv, "_hd", a.head_dim, "_rot", a.rot_dim);
                         });

// ---- padded rounds ----

class CudaAttentionPadded : public CudaTestWithParam<int> {};

// A stream padded to its capacity bucket (engine/round_capacity.h), outputs poisoned: attention,
// attention_gated and gated_attention over every row match the reference on the real rows and
// leave zeros on the padding rows, as the CPU backend does.
TEST_P(CudaAttentionPadded, PaddingRowsAreZeros) {
  const int hd = GetParam(), hq = 4, hkv = 2, rot = hd / 4;
  std::mt19937 gen{std::random_device{}()};
  const Stream base = build_stream(tree_cases()[3].nodes, 0, gen);
  const Stream s = pad_stream(base, *capacity_for(base, 1 << 20));
  ASSERT_GT(s.pad_tokens, 0);
  const int64_t T = s.n_tokens(), Cq = int64_t(hq) * hd, Ckv = int64_t(hkv) * hd;
  const double scale = 1.0 / std::sqrt(double(hd)), eps = 1e-6, theta = 1e7;
  Pair p;
  p.set_stream(s);
  auto norm = p.put(1, hd, random_floats(gen, hd, -0.5, 0.5));
  auto k = p.put(T, Ckv, random_floats(gen, T * Ckv, -2, 2));
  auto v = p.put(T, Ckv, random_floats(gen, T * Ckv, -1, 1));
  auto q = p.put(T, Cq, random_floats(gen, T * Cq, -2, 2));
  auto gate = p.put(T, Cq, random_floats(gen, T * Cq, -2, 2));
  auto qg = p.put(T, 2 * Cq, random_floats(gen, T * 2 * Cq, -2, 2));
  auto out = p.poison(T, Cq), gated = p.poison(T, Cq), fused = p.poison(T, Cq);
  p.both([&](Ops& ops, auto side) {
    ops.attention(side(q), side(k), side(v), side(out), Rows::Rows_all, hq, hkv, hd, scale);
    ops.attention_gated(side(q), side(gate), side(k), side(v), side(gated), Rows::Rows_all, hq, hkv,
                        hd, scale);
    ops.gated_attention(side(qg), side(norm), side(k), side(v), side(fused), Rows::Rows_all, hq,
                        hkv, hd, rot, theta, eps, scale);
  });
  const std::string context = cat("hd ", hd, ", ", s.pad_tokens, " padding rows");
  using Named = std::pair<const char*, Pair::Buf>;
  for (const auto& [name, buf] : {Named{"attention", out}, Named{"attention_gated", gated},
                                  Named{"gated_attention", fused}}) {
    expect_rms(name, p.got(buf), p.ref(buf), kTolBf16, context);
    expect_zero_rows(name, p.got(buf), T - s.pad_tokens, Cq);
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionPadded, ::testing::Values(64, 128, 256),
                         [](const auto& info) { return cat("hd", info.param); });

// ---- a layer's projections: the products, the query side and the key side ----

struct ProjShape {
  std::vector<NodeSpec> nodes;
  int heads, heads_kv, head_dim, rot_dim;
  int64_t K;
};
void PrintTo(const ProjShape& s, std::ostream* os) {
  *os << s.nodes.size() << " nodes, heads " << s.heads << "/" << s.heads_kv << " hd " << s.head_dim
      << " rot " << s.rot_dim << " K " << s.K;
}

class CudaAttentionProjections : public CudaTestWithParam<ProjShape> {};

// The fused GEMM where it takes the shape (head_dim 256, K a multiple of 8), Ops' five steps
// elsewhere; the test checks which ran. Against the float64 reference: under kTolBf16 (the
// products' and the norm's and rotation's roundings); the fused outputs against the GPU's five
// steps (three matmuls, attention_query, attention_key): the same bits. Positions run up to ~1,700
// (a root starts at 300).
TEST_P(CudaAttentionProjections, MatchesReferenceAndFiveSteps) {
  const ProjShape& shape = GetParam();
  const int hq = shape.heads, hkv = shape.heads_kv, hd = shape.head_dim, rot = shape.rot_dim;
  const int64_t K = shape.K;
  std::mt19937 gen{std::random_device{}()};
  const Stream s = build_stream(shape.nodes, 0, gen);
  const int64_t T = s.n_tokens(), Cq = int64_t(hq) * hd, Ckv = int64_t(hkv) * hd;
  const double theta = 1e7, eps = 1e-6, ws = 2.0 / std::sqrt(double(K));
  Pair p;
  p.set_stream(s);
  Ops& gpu = p.gpu();
  auto h = p.put(T, K, random_floats(gen, T * K, -1, 1));
  auto wq = p.put(2 * Cq, K, random_floats(gen, 2 * Cq * K, -ws, ws));
  auto wk = p.put(Ckv, K, random_floats(gen, Ckv * K, -ws, ws));
  auto wv = p.put(Ckv, K, random_floats(gen, Ckv * K, -ws, ws));
  auto qn = p.put(1, hd, random_floats(gen, hd, -0.5, 0.5));
  auto kn = p.put(1, hd, random_floats(gen, hd, -0.5, 0.5));
  auto q = p.poison(T, Cq), gate = p.poison(T, Cq), k = p.poison(T, Ckv), v = p.poison(T, Ckv);
  const bool fused = kernels::attention_projections_supported(
      h.gpu.data, wq.gpu.data, wk.gpu.data, wv.gpu.data, qn.gpu.data, kn.gpu.data, q.gpu.data,
      gate.gpu.data, k.gpu.data, v.gpu.data, K, hd, rot);
  EXPECT_EQ(fused, hd == 256 && K % 8 == 0);
  const auto ran = ops_run(gpu, [&] {
    gpu.attention_projections(h.gpu, wq.gpu, wk.gpu, wv.gpu, qn.gpu, kn.gpu, q.gpu, gate.gpu, k.gpu,
                              v.gpu, hq, hkv, hd, rot, theta, eps);
  });
  const std::set<std::string> expected =
      fused ? std::set<std::string>{"attention_projections"}
            : std::set<std::string>{"matmul", "attention_query", "attention_key"};
  EXPECT_EQ(ran, expected);
  p.cpu().attention_projections(h.cpu, wq.cpu, wk.cpu, wv.cpu, qn.cpu, kn.cpu, q.cpu, gate.cpu,
                                k.cpu, v.cpu, hq, hkv, hd, rot, theta, eps);
  const std::string context = cat("T ", T, " hd ", hd, " rot ", rot, " K ", K);
  for (const auto& [name, buf] : {std::pair{"q", &q}, {"gate", &gate}, {"k", &k}, {"v", &v}})
    expect_rms(cat("attention_projections ", name), p.got(*buf), p.ref(*buf), kTolBf16, context);
  if (!fused) return;
  View qg = gpu.alloc(T, 2 * Cq), q5 = gpu.alloc(T, Cq), gate5 = gpu.alloc(T, Cq);
  View k5 = gpu.alloc(T, Ckv), v5 = gpu.alloc(T, Ckv);
  gpu.matmul(h.gpu, wq.gpu, qg);
  gpu.matmul(h.gpu, wk.gpu, k5);
  gpu.matmul(h.gpu, wv.gpu, v5);
  gpu.attention_query(qg, qn.gpu, q5, gate5, Rows::Rows_all, hq, hd, rot, theta, eps);
  gpu.attention_key(k5, kn.gpu, hkv, hd, rot, theta, eps);
  for (const auto& [name, buf, five] :
       {std::tuple{"q", &q, q5}, {"gate", &gate, gate5}, {"k", &k, k5}, {"v", &v, v5}})
    expect_exact(cat("attention_projections ", name, " (fused against five steps)"), p.got(*buf),
                 p.got(five), context);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionProjections,
    ::testing::Values(
        // the 0.8B model's heads: a trunk and two questions over 21 row tiles, 20 column tiles
        ProjShape{{{-1, 1200, -1, -2, 300}, {0, 70}, {0, 70}}, 8, 2, 256, 64, 1024},
        // one row; an odd row-tile count (a pair's second tile past the end) with a short K
        ProjShape{{{-1, 1, -1, -2, 300}}, 8, 2, 256, 64, 1024},
        ProjShape{{{-1, 130, -1, -2, 300}, {0, 65}, {0, 7}}, 4, 1, 256, 256, 200},
        // five k-blocks on a ring of three stages, every dim turned by a ragged rot
        ProjShape{{{-1, 300, -1, -2, 300}}, 2, 2, 256, 98, 264},
        // the five steps: head_dim 64, or K not a multiple of 8
        ProjShape{{{-1, 130, -1, -2, 300}, {0, 9}}, 4, 2, 64, 16, 128},
        ProjShape{{{-1, 40, -1, -2, 300}}, 2, 1, 256, 64, 29}),
    [](const auto& info) {
      const ProjShape& a = info.param;
      return cat(a.nodes.size(), "nodes_q", a.heads, "_kv", a.heads_kv, "_hd", a.head_dim, "_rot",
                 a.rot_dim, "_K", a.K);
    });

}  // namespace
}  // namespace flide::test
