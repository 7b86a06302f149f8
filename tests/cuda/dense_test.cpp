// Token-wise ops and the readout on the CUDA backend against the CPU float64 backend, on the
// same bf16-exact random inputs (cuda_test_util.h): embed, rmsnorm, matmul and matmul_add
// (cuBLASLt, bf16 and f32 outputs, odd and badly aligned shapes), swiglu, z_gated_rmsnorm,
// silu_mul, sigmoid_mul, gather_rows, select_logits. Outputs start as NaN on both sides.
#include "kernels/dense.h"

#include <cmath>
#include <random>
#include <tuple>

#include "backend/cuda/cuda_ops.h"
#include "cuda_test_util.h"

namespace flide::test {
namespace {

class CudaDense : public CudaTest {};

TEST_F(CudaDense, EmbedCopiesRowsExactly) {
  std::mt19937 gen(1);
  const std::vector<NodeSpec> spec = {{-1, 130}, {0, 1}, {0, 65}, {2, 7}};
  const Stream s = build_stream(spec, 0, gen, 57);
  const int64_t V = 57, H = 37, T = s.n_tokens();
  Pair p;
  p.set_stream(s);
  auto table = p.put(V, H, random_floats(gen, V * H, -2, 2));
  auto out = p.poison(T, H);
  p.both([&](Ops& ops, auto v) { ops.embed(v(table), v(out)); });
  expect_exact("embed", p.got(out), p.ref(out));
}

struct NormShape {
  int64_t rows, cols;
};
void PrintTo(const NormShape& s, std::ostream* os) {
  *os << "[" << s.rows << ", " << s.cols << "]";
}

class CudaNorm : public CudaTestWithParam<NormShape> {};

TEST_P(CudaNorm, RmsnormBothOffsetsAndInPlace) {
  const auto [R, C] = GetParam();
  std::mt19937 gen{uint32_t(R * 31 + C)};
  Pair p;
  auto x = p.put(R, C, random_floats(gen, R * C, -3, 3));
  auto w = p.put(1, C, random_floats(gen, C, -0.5, 0.5));
  for (bool unit_offset : {true, false}) {
    auto out = p.poison(R, C);
    p.both([&](Ops& ops, auto v) { ops.rmsnorm(v(x), v(w), v(out), 1e-6, unit_offset); });
    expect_rms("rmsnorm", p.got(out), p.ref(out), kTolBf16,
               cat("[", R, ", ", C, "] unit_offset ", unit_offset));
  }
  auto y = p.put(R, C, random_floats(gen, R * C, -3, 3));  // in place, as the q/k norms run
  p.both([&](Ops& ops, auto v) { ops.rmsnorm(v(y), v(w), v(y), 1e-6, true); });
  expect_rms("rmsnorm", p.got(y), p.ref(y), kTolBf16, "in place");
}

TEST_P(CudaNorm, GatedRmsnorm) {
  const auto [R, C] = GetParam();
  std::mt19937 gen{uint32_t(R * 13 + C)};
  Pair p;
  auto o = p.put(R, C, random_floats(gen, R * C, -2, 2));
  auto z = p.put(R, C, random_floats(gen, R * C, -3, 3));
  auto w = p.put(1, C, random_floats(gen, C, 0.5, 1.5));
  auto out = p.poison(R, C);
  p.both([&](Ops& ops, auto v) { ops.gated_rmsnorm(v(o), v(z), v(w), v(out), 1e-6); });
  expect_rms("gated_rmsnorm", p.got(out), p.ref(out), kTolBf16, cat("[", R, ", ", C, "]"));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaNorm,
    ::testing::Values(NormShape{1, 1}, NormShape{1, 16}, NormShape{7, 37}, NormShape{130, 24},
                      NormShape{200, 128}, NormShape{65, 256}, NormShape{3, 1000},
                      NormShape{4, 777}, NormShape{2, 4096}, NormShape{300, 1024},
                      NormShape{3, 10000}, NormShape{2, 9001},
                      // more rows than the packed grid's warps take at once (two blocks an SM):
                      // each warp walks several rows
                      NormShape{5000, 1024}, NormShape{20000, 64}),
    [](const auto& info) { return cat(info.param.rows, "x", info.param.cols); });

// ---- matmul ----

struct MatmulShape {
  int64_t M, N, K;
};
void PrintTo(const MatmulShape& s, std::ostream* os) {
  *os << "M " << s.M << " N " << s.N << " K " << s.K;
}

class CudaMatmul : public CudaTestWithParam<std::tuple<MatmulShape, DType>> {};

// bf16 out: one rounding of an fp32 sum (kTolBf16). f32 out: no rounding at all beyond the
// fp32 accumulation (kTolF32Out).
TEST_P(CudaMatmul, MatchesReference) {
  const auto [shape, out_dtype] = GetParam();
  const auto [M, N, K] = shape;
  std::mt19937 gen{uint32_t(M * 7 + N * 3 + K)};
  Pair p;
  auto x = p.put(M, K, random_floats(gen, M * K, -1, 1));
  auto w = p.put(N, K, random_floats(gen, N * K, -1, 1));
  const bool f32 = out_dtype == DType::DType_f32;
  auto out = p.poison(M, N, f32);
  p.both([&](Ops& ops, auto v) { ops.matmul(v(x), v(w), v(out)); });
  const std::string label = f32 ? "matmul -> f32" : "matmul -> bf16";
  expect_rms(label, p.got(out), p.ref(out), f32 ? kTolF32Out : kTolBf16,
             cat("M ", M, " N ", N, " K ", K));
  if (M > 1) {  // x and out one row further: pointers only 2-byte aligned for odd K / N
    auto out2 = p.poison(M - 1, N, f32);
    p.both([&](Ops& ops, auto v) { ops.matmul(v(x.rows_from(1)), v(w), v(out2)); });
    expect_rms(label + " (offset rows)", p.got(out2), p.ref(out2), f32 ? kTolF32Out : kTolBf16,
               cat("M ", M - 1, " N ", N, " K ", K));
  }
  // matmul_add onto an accumulator as large as the product (the residual stream's case): the
  // sum is rounded once, so the same tolerance holds; an ignored or doubled accumulator fails.
  auto acc = p.put(M, N, random_floats(gen, M * N, -2, 2), f32);
  p.both([&](Ops& ops, auto v) { ops.matmul_add(v(x), v(w), v(acc)); });
  expect_rms(f32 ? "matmul_add -> f32" : "matmul_add -> bf16", p.got(acc), p.ref(acc),
             f32 ? kTolF32Out : kTolBf16, cat("M ", M, " N ", N, " K ", K));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaMatmul,
    ::testing::Combine(::testing::Values(MatmulShape{1, 1, 1}, MatmulShape{7, 13, 5},
                                         MatmulShape{37, 53, 29}, MatmulShape{130, 96, 48},
                                         MatmulShape{200, 1000, 64}, MatmulShape{64, 64, 256},
                                         MatmulShape{1, 300, 48}, MatmulShape{513, 40, 80},
                                         MatmulShape{260, 2048, 1024}),
                       ::testing::Values(DType::DType_bf16, DType::DType_f32)),
    [](const auto& info) {
      const MatmulShape s = std::get<0>(info.param);
      return cat(s.M, "x", s.N, "x", s.K, "_",
                 std::get<1>(info.param) == DType::DType_f32 ? "f32" : "bf16");
    });

// A server's rounds bring a new row count almost every time: the backend keeps the plans of
// the most recent shapes only, and a shape whose plan it dropped is planned again, correctly.
TEST_F(CudaDense, MatmulPlansStayBoundedAndReplanAfterEviction) {
  Pair p;
  auto* cuda = dynamic_cast<CudaOps*>(&p.gpu());
  ASSERT_NE(cuda, nullptr);
  std::mt19937 gen{std::random_device{}()};
  const int64_t N = 24, K = 40, rows = int64_t(CudaOps::kGemmPlans) + 40;
  auto x = p.put(rows, K, random_floats(gen, rows * K, -1, 1));
  auto w = p.put(N, K, random_floats(gen, N * K, -1, 1));
  auto first = [](const Pair::Buf& b, int64_t m) {
    return Pair::Buf{b.gpu.first_rows(m), b.cpu.first_rows(m)};
  };
  auto out = p.poison(rows, N);
  for (int64_t m = 1; m <= rows; ++m)
    p.gpu().matmul(x.gpu.first_rows(m), w.gpu, out.gpu.first_rows(m));
  EXPECT_EQ(cuda->gemm_plans_cached(), CudaOps::kGemmPlans);
  for (int64_t m : {int64_t(1), int64_t(17), rows}) {  // the first two were evicted
    auto o = p.poison(m, N);
    p.both([&](Ops& ops, auto v) { ops.matmul(v(first(x, m)), v(w), v(o)); });
    expect_rms("matmul -> bf16 (replanned)", p.got(o), p.ref(o), kTolBf16, cat("M ", m));
  }
  EXPECT_EQ(cuda->gemm_plans_cached(), CudaOps::kGemmPlans);
}

TEST_F(CudaDense, MatmulWithEmptyInnerDimensionIsZero) {
  Pair p;
  auto x = p.put(3, 0, {});
  auto w = p.put(5, 0, {});
  auto out = p.poison(3, 5);
  p.both([&](Ops& ops, auto v) { ops.matmul(v(x), v(w), v(out)); });
  for (double d : p.got(out)) EXPECT_EQ(d, 0.0);
  std::mt19937 gen{std::random_device{}()};
  const std::vector<float> kept = random_floats(gen, 15, -1, 1);
  auto acc = p.put(3, 5, kept);  // adding an empty product leaves the accumulator as it is
  p.both([&](Ops& ops, auto v) { ops.matmul_add(v(x), v(w), v(acc)); });
  EXPECT_EQ(first_difference(p.got(acc), widen(rounded_bf16(kept))), -1);
}

// ---- swiglu ----

class CudaSwiglu : public CudaTestWithParam<MatmulShape> {};

// The fused GEMM where it takes the shape (N a multiple of 128, K of 8, 16-byte aligned rows),
// Ops' three steps elsewhere; the test checks which one the dispatch rule picks and that the
// GPU ran it (its profile). Three bf16 roundings (gate, up, the product) against the float64
// reference: about 3.5e-3 relative RMS, under kTolBf16.
TEST_P(CudaSwiglu, MatchesReference) {
  const auto [M, N, K] = GetParam();
  std::mt19937 gen{std::random_device{}()};
  Pair p;
  auto x = p.put(M, K, random_floats(gen, M * K, -1, 1));
  const double scale = 2.0 / std::sqrt(double(K));  // gate and up of order 1: silu's bend
  auto wg = p.put(N, K, random_floats(gen, N * K, -scale, scale));
  auto wu = p.put(N, K, random_floats(gen, N * K, -scale, scale));
  for (const int64_t from : {int64_t(0), int64_t(1)}) {  // x one row on: K * 2 bytes off
    if (from >= M) break;
    const auto xs = x.rows_from(from);
    auto out = p.poison(M - from, N);
    const bool fused =
        kernels::swiglu_gemm_supported(xs.gpu.data, wg.gpu.data, wu.gpu.data, out.gpu.data, N, K);
    EXPECT_EQ(fused, N % 128 == 0 && K % 8 == 0) << "M " << M << " N " << N << " K " << K;
    const auto ran = ops_run(p.gpu(), [&] { p.gpu().swiglu(xs.gpu, wg.gpu, wu.gpu, out.gpu); });
    const std::set<std::string> expected =
        fused ? std::set<std::string>{"swiglu"} : std::set<std::string>{"matmul", "silu_mul"};
    EXPECT_EQ(ran, expected);
    p.cpu().swiglu(xs.cpu, wg.cpu, wu.cpu, out.cpu);
    expect_rms(fused ? "swiglu (fused)" : "swiglu (three steps)", p.got(out), p.ref(out), kTolBf16,
               cat("M ", M - from, " N ", N, " K ", K));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaSwiglu,
                         ::testing::Values(MatmulShape{1, 128, 64}, MatmulShape{130, 256, 200},
                                           MatmulShape{257, 384, 72}, MatmulShape{1000, 128, 8},
                                           MatmulShape{300, 3584, 1024},
                                           // 120 tile pairs for ~66 clusters: several tiles a
                                           // CTA, each starting mid-ring (5 k-blocks, 3 stages)
                                           MatmulShape{3000, 1280, 264},
                                           // the 4B model's MLP: 94 MB of weights, grouped order
                                           MatmulShape{600, 9216, 2560}, MatmulShape{7, 96, 40},
                                           MatmulShape{37, 130, 29}, MatmulShape{5, 256, 36}),
                         [](const auto& info) {
                           return cat(info.param.M, "x", info.param.N, "x", info.param.K);
                         });

// ---- z_gated_rmsnorm ----

struct GateNormShape {
  int64_t M, heads, head_dim, K;
};
void PrintTo(const GateNormShape& s, std::ostream* os) {
  *os << "M " << s.M << " heads " << s.heads << " x " << s.head_dim << " K " << s.K;
}

class CudaZGatedNorm : public CudaTestWithParam<GateNormShape> {};

// The fused GEMM where it takes the shape (heads of 128, Vd a multiple of 256, K of 8, 16-byte
// aligned rows), matmul and gated_rmsnorm elsewhere; the test checks which one ran (the GPU's
// profile). z's rounding to bf16 and the output's, against the float64 reference: under
// kTolBf16; the fused outputs against the GPU's two steps: the same bits.
TEST_P(CudaZGatedNorm, MatchesReferenceAndTwoSteps) {
  const auto [M, heads, D, K] = GetParam();
  const int64_t Vd = heads * D;
  std::mt19937 gen{std::random_device{}()};
  Pair p;
  Ops& gpu = p.gpu();
  auto h = p.put(M, K, random_floats(gen, M * K, -1, 1));
  const double scale = 3.0 / std::sqrt(double(K));  // z of order 1-3: silu's bend and tails
  auto wz = p.put(Vd, K, random_floats(gen, Vd * K, -scale, scale));
  auto o = p.put(M, Vd, random_floats(gen, M * Vd, -2, 1));
  auto w = p.put(1, D, random_floats(gen, D, 0.5, 1.5));
  for (const int64_t from : {int64_t(0), int64_t(1)}) {  // h and o one row on
    if (from >= M) break;
    const auto hs = h.rows_from(from), os = o.rows_from(from);
    auto out = p.poison(M - from, Vd);
    const bool fused = kernels::z_gated_rmsnorm_supported(hs.gpu.data, wz.gpu.data, os.gpu.data,
                                                          w.gpu.data, out.gpu.data, Vd, K, D);
    EXPECT_EQ(fused, D == 128 && Vd % 256 == 0 && K % 8 == 0)
        << "M " << M << " Vd " << Vd << " K " << K;
    const auto ran =
        ops_run(gpu, [&] { gpu.z_gated_rmsnorm(os.gpu, hs.gpu, wz.gpu, w.gpu, out.gpu, 1e-6); });
    const std::set<std::string> expected = fused ? std::set<std::string>{"z_gated_rmsnorm"}
                                                 : std::set<std::string>{"matmul", "gated_rmsnorm"};
    EXPECT_EQ(ran, expected);
    p.cpu().z_gated_rmsnorm(os.cpu, hs.cpu, wz.cpu, w.cpu, out.cpu, 1e-6);
    const std::string context = cat("M ", M - from, " Vd ", Vd, " K ", K);
    expect_rms(fused ? "z_gated_rmsnorm (fused)" : "z_gated_rmsnorm (two steps)", p.got(out),
               p.ref(out), kTolBf16, context);
    if (!fused) continue;
    View z = gpu.scratch(M - from, Vd), two = gpu.alloc(M - from, Vd);
    gpu.matmul(hs.gpu, wz.gpu, z);
    gpu.gated_rmsnorm(os.gpu.reshaped(D), z.reshaped(D), w.gpu, two.reshaped(D), 1e-6);
    Vec two_host(size_t(two.size()));
    gpu.download(two, two_host.data());
    expect_exact("z_gated_rmsnorm (fused against two steps)", p.got(out), two_host, context);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaZGatedNorm,
    ::testing::Values(GateNormShape{1, 16, 128, 1024}, GateNormShape{130, 2, 128, 200},
                      GateNormShape{300, 16, 128, 1024},
                      // 96 tile pairs for ~66 clusters, 5 k-blocks on a ring of 3 stages
                      GateNormShape{3000, 8, 128, 264}, GateNormShape{257, 3, 128, 72},
                      GateNormShape{33, 4, 64, 40}, GateNormShape{9, 2, 128, 29},
                      // a 26 MB gate weight: units in groups of 8 row pairs, the last one short
                      GateNormShape{2500, 32, 128, 3200}),
    [](const auto& info) {
      return cat(info.param.M, "x", info.param.heads, "x", info.param.head_dim, "x", info.param.K);
    });

// ---- elementwise ----

class CudaElementwise : public CudaTestWithParam<int64_t> {};

TEST_P(CudaElementwise, SiluMulSigmoidMul) {
  const int64_t n = GetParam();
  std::mt19937 gen{uint32_t(n)};
  Pair p;
  auto gate = p.put(1, n, random_floats(gen, n, -6, 6));
  auto up = p.put(1, n, random_floats(gen, n, -2, 2));
  auto out = p.poison(1, n);
  p.both([&](Ops& ops, auto v) { ops.silu_mul(v(gate), v(up), v(out)); });
  expect_rms("silu_mul", p.got(out), p.ref(out), kTolBf16, cat("n ", n));
  p.both([&](Ops& ops, auto v) { ops.silu_mul(v(gate), v(up), v(gate)); });  // out aliases gate
  expect_rms("silu_mul", p.got(gate), p.ref(gate), kTolBf16, cat("n ", n, " in place"));

  auto y = p.put(1, n, random_floats(gen, n, -2, 2));
  auto g2 = p.put(1, n, random_floats(gen, n, -6, 6));
  p.both([&](Ops& ops, auto v) { ops.sigmoid_mul(v(y), v(g2)); });
  expect_rms("sigmoid_mul", p.got(y), p.ref(y), kTolBf16, cat("n ", n));
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaElementwise,
                         ::testing::Values(int64_t(1), int64_t(7), int64_t(1000), int64_t(4097),
                                           int64_t(1) << 20));

// ---- row and column movement ----

TEST_F(CudaDense, GatherRowsBf16AndF32Exactly) {
  std::mt19937 gen(3);
  const Stream base = build_stream(tree_cases()[2].nodes, 0, gen);
  Stream s = base;
  s.out_rows = pick_out_rows(s, gen, 0.1);
  const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size());
  Pair p;
  p.set_stream(s);
  for (bool f32 : {false, true}) {
    for (int64_t C : {int64_t(1), int64_t(37), int64_t(256)}) {
      auto x = p.put(T, C, random_floats(gen, T * C, -5, 5), f32);
      auto out = p.poison(R, C, f32);
      p.both([&](Ops& ops, auto v) { ops.gather_rows(v(x), v(out)); });
      expect_exact(f32 ? "gather_rows f32" : "gather_rows bf16", p.got(out), p.ref(out),
                   cat("cols ", C));
    }
  }
}

// ---- readout ----

TEST_F(CudaDense, SelectLogits) {
  std::mt19937 gen(5);
  Stream s = build_stream(tree_cases()[3].nodes, 0, gen);
  s.out_rows = pick_out_rows(s, gen, 0.05);
  const int64_t R = int64_t(s.out_rows.size()), V = 301;
  std::uniform_int_distribution<int> row(0, int(R) - 1), id(0, int(V) - 1);
  for (int m = 0; m < 200; ++m) {
    s.select_out.push_back(row(gen));
    s.select_ids.push_back(id(gen));
  }
  s.select_ids.push_back(int32_t(V) - 1);  // the last row of the LM head
  s.select_out.push_back(int32_t(R) - 1);
  for (int64_t H : {int64_t(40), int64_t(1024)}) {
    Pair p;
    p.set_stream(s);
    auto h = p.put(R, H, random_floats(gen, R * H, -1, 1));
    auto w = p.put(V, H, random_floats(gen, V * H, -1, 1));
    auto out = p.poison(int64_t(s.select_ids.size()), 1, true);
    p.both([&](Ops& ops, auto v) { ops.select_logits(v(h), v(w), v(out)); });
    expect_rms("select_logits", p.got(out), p.ref(out), kTolF32Out, cat("H ", H));
  }
}

}  // namespace
}  // namespace flide::test
