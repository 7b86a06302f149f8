// The fused products on FP8 operands (make_cuda_ops with Quantization_fp8, backend/cuda/fp8.cpp):
// swiglu, z_gated_rmsnorm, gdn_qkv_conv and attention_projections, each checked two ways.
//
// Lossless operands: every row of x and of each weight is an e4m3 value times a power of two,
// with one element at e4m3's largest (448), so quantize_rows_fp8 finds that power of two as the
// row's scale and keeps every value exactly. The FP8 products then multiply the same numbers the
// bf16 products do, and the two paths of one backend (the weight with an FP8 copy, and an
// identical weight without one) may differ only where the tensor cores' FP8 accumulation moves
// an output's bf16 rounding: Hopper's FP8 products accumulate in fewer bits than fp32, and on
// the H200 the two paths differ by 1.8e-3 to 2.9e-3 relative RMS (about one bf16 step, 2^-8,
// in half the outputs); 6e-3 is allowed. A wrong tile layout, k-block, scale or row moves
// outputs by their own order.
//
// Random operands against the float64 reference: e4m3 keeps 3 mantissa bits, so each operand
// rounds by up to 2^-4 relative (~3.6% RMS), and an output over K random terms carries ~5%:
// kTolFp8 (0.1) bounds that, and the worst seen goes to the report (the figure FP8's accuracy is
// stated with at the model level: bench/results).
#include <cuda_fp8.h>

#include <array>
#include <random>

#include "cuda_test_util.h"
#include "kernels/dense.h"

namespace flide::test {
namespace {

constexpr double kTolFp8Lossless = 6e-3;
constexpr double kTolFp8 = 0.1;

// A random e4m3 value of magnitude 4 to 448 (exponent field 9-15), sign random.
float random_e4m3(std::mt19937& gen) {
  std::uniform_int_distribution<int> exp(9, 15), man(0, 7), sign(0, 1);
  int e = exp(gen), m = man(gen);
  if (e == 15 && m == 7) m = 6;  // 0x7f is NaN
  const float v = std::ldexp(1.0f + float(m) / 8.0f, e - 7);
  return sign(gen) ? -v : v;
}

// [rows, cols] values that quantize to FP8 without loss: row r is 2^(shift_r) times e4m3 values,
// one of them +-448.
std::vector<float> lossless(std::mt19937& gen, int64_t rows, int64_t cols, int lo_shift,
                            int hi_shift) {
  std::uniform_int_distribution<int> shift(lo_shift, hi_shift);
  std::uniform_int_distribution<int64_t> at(0, cols - 1);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const int s = shift(gen);
    float* row = out.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) row[c] = std::ldexp(random_e4m3(gen), s);
    row[at(gen)] = std::ldexp(gen() % 2 ? 448.0f : -448.0f, s);
  }
  return out;
}

// A copy of w's values with no FP8 copy kept: the op runs in bf16 with it.
Pair::Buf unquantized_twin(Pair& p, const Pair::Buf& w) {
  Pair::Buf twin{p.gpu().alloc(w.gpu.rows, w.gpu.cols), w.cpu};
  const Vec host = p.got(w);
  const std::vector<float> values(host.begin(), host.end());
  p.gpu().upload(twin.gpu, values.data());
  return twin;
}

class CudaFp8 : public CudaTestWithParam<bool> {
 protected:
  void SetUp() override {
    CudaTestWithParam<bool>::SetUp();
    if (!IsSkipped()) pair_ = std::make_unique<Pair>(Quantization::Quantization_fp8);
  }
  Pair& p() { return *pair_; }

  bool lossless_ = GetParam();
  std::mt19937 gen_{std::random_device{}()};
  std::unique_ptr<Pair> pair_;  // made once the device is known to be there

  // x [rows, cols]: activations of order 1, or lossless ones.
  Pair::Buf activations(int64_t rows, int64_t cols) {
    return p().put(
        rows, cols,
        lossless_ ? lossless(gen_, rows, cols, -9, -7) : random_floats(gen_, rows * cols, -1, 1));
  }
  // A weight [rows, cols] of products of order `scale` x sqrt(cols) with the activations, with
  // its FP8 copy kept.
  Pair::Buf weight(int64_t rows, int64_t cols, double scale) {
    const int shift = int(std::floor(std::log2(scale))) - 8;
    Pair::Buf w = p().put(rows, cols,
                          lossless_ ? lossless(gen_, rows, cols, shift - 1, shift)
                                    : random_floats(gen_, rows * cols, -scale, scale));
    p().gpu().quantize_weight(w.gpu);
    return w;
  }
  // The FP8 outputs against the float64 reference (random operands) or against the bf16 path's
  // (lossless ones, bf16_out).
  void check(const std::string& op, const Pair::Buf& out, const Vec& bf16_out,
             const std::string& context) {
    if (lossless_)
      expect_rms(op + " fp8 vs bf16 (lossless operands)", p().got(out), bf16_out, kTolFp8Lossless,
                 context);
    else
      expect_rms(op + " fp8 vs float64", p().got(out), p().ref(out), kTolFp8, context);
  }
};

TEST_P(CudaFp8, Swiglu) {
  for (const auto& [M, N, K] :
       {std::tuple<int64_t, int64_t, int64_t>{300, 3584, 1024}, {257, 256, 208}, {1, 128, 64}}) {
    const double scale = 2.0 / std::sqrt(double(K));
    auto x = activations(M, K);
    auto wg = weight(N, K, scale), wu = weight(N, K, scale);
    auto out = p().poison(M, N), out16 = p().poison(M, N);
    Ops& gpu = p().gpu();
    EXPECT_EQ(ops_run(gpu, [&] { gpu.swiglu(x.gpu, wg.gpu, wu.gpu, out.gpu); }),
              (std::set<std::string>{"quantize_fp8", "swiglu"}));
    gpu.swiglu(x.gpu, unquantized_twin(p(), wg).gpu, unquantized_twin(p(), wu).gpu, out16.gpu);
    p().cpu().swiglu(x.cpu, wg.cpu, wu.cpu, out.cpu);
    check("swiglu", out, p().got(out16), cat("M ", M, " N ", N, " K ", K));
  }
}

TEST_P(CudaFp8, ZGatedRmsnorm) {
  for (const auto& [M, heads, K] :
       {std::tuple<int64_t, int64_t, int64_t>{300, 16, 1024}, {130, 2, 208}}) {
    const int64_t D = 128, Vd = heads * D;
    auto h = activations(M, K);
    auto wz = weight(Vd, K, 3.0 / std::sqrt(double(K)));
    auto o = p().put(M, Vd, random_floats(gen_, M * Vd, -2, 1));
    auto w = p().put(1, D, random_floats(gen_, D, 0.5, 1.5));
    auto out = p().poison(M, Vd), out16 = p().poison(M, Vd);
    Ops& gpu = p().gpu();
    EXPECT_EQ(
        ops_run(gpu, [&] { gpu.z_gated_rmsnorm(o.gpu, h.gpu, wz.gpu, w.gpu, out.gpu, 1e-6); }),
        (std::set<std::string>{"quantize_fp8", "z_gated_rmsnorm"}));
    gpu.z_gated_rmsnorm(o.gpu, h.gpu, unquantized_twin(p(), wz).gpu, w.gpu, out16.gpu, 1e-6);
    p().cpu().z_gated_rmsnorm(o.cpu, h.cpu, wz.cpu, w.cpu, out.cpu, 1e-6);
    check("z_gated_rmsnorm", out, p().got(out16), cat("M ", M, " Vd ", Vd, " K ", K));
  }
}

// [rows, cols] values that quantize_tiles_fp8 keeps exactly: each 128 x 128 tile is 2^shift times
// e4m3 values, one of them +-448 (as `lossless`, a tile for a row).
std::vector<float> lossless_tiles(std::mt19937& gen, int64_t rows, int64_t cols, int lo_shift,
                                  int hi_shift) {
  std::uniform_int_distribution<int> shift(lo_shift, hi_shift);
  std::uniform_int_distribution<int64_t> at(0, kernels::kFp8Block - 1);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += kernels::kFp8Block)
    for (int64_t c0 = 0; c0 < cols; c0 += kernels::kFp8Block) {
      const int s = shift(gen);
      for (int64_t r = r0; r < r0 + kernels::kFp8Block; ++r)
        for (int64_t c = c0; c < c0 + kernels::kFp8Block; ++c)
          out[size_t(r * cols + c)] = std::ldexp(random_e4m3(gen), s);
      out[size_t((r0 + at(gen)) * cols + c0 + at(gen))] = std::ldexp(gen() % 2 ? 448.f : -448.f, s);
    }
  return out;
}

// acc + x . w^T in float64 with x [M, K] first quantized as the FP8 kernels quantize their
// blocks (fp8_rows.cuh: a row's 128 columns a group, in float, its scale amax / 448 or 1): w [N,
// K], acc [M, N].
Vec fp8_block_product(const Vec& acc, const Vec& x, const Vec& w, int64_t M, int64_t N, int64_t K) {
  Vec xq(x.size());
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c0 = 0; c0 < K; c0 += kernels::kFp8Block) {
      const int64_t c1 = std::min(K, c0 + kernels::kFp8Block);
      float amax = 0.f;
      for (int64_t c = c0; c < c1; ++c)
        amax = std::max(amax, std::abs(float(x[size_t(r * K + c)])));
      const float s = amax > 0.f ? amax / 448.f : 1.f, inv = 1.f / s;
      for (int64_t c = c0; c < c1; ++c)
        xq[size_t(r * K + c)] = double(float(__nv_fp8_e4m3(float(x[size_t(r * K + c)]) * inv))) * s;
    }
  Vec out(acc);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += xq[size_t(r * K + k)] * w[size_t(n * K + k)];
      out[size_t(r * N + n)] += sum;
    }
  return out;
}

// The output projections on FP8 blocks: swiglu_into_product and z_gated_rmsnorm_into_product
// write their output only as FP8 blocks, and the matmul_add that reads it runs on those and on
// its weight's 128 x 128 tiles. The weight here is lossless per tile, so the only loss is the
// input's quantization, which the reference repeats on the host from the bf16 path's output (the
// same bf16 values the kernels quantize) before multiplying in float64. What remains is the
// output's bf16 rounding (~1e-3 relative RMS) and a code the device's approximate division rounds
// the other way (rare); a wrong block scale, row or layout moves outputs by their own order.
constexpr double kTolFp8Blocks = 4e-3;

class CudaFp8Blocks : public CudaFp8 {
 protected:
  // The projection's weight [N, K] (lossless tiles, its tile copy kept) and acc [M, N] twice.
  struct Projection {
    Pair::Buf w, acc, acc_start;
  };
  Projection projection(int64_t M, int64_t N, int64_t K) {
    const int shift = int(std::floor(std::log2(1.0 / std::sqrt(double(K))))) - 8;
    Projection pr{p().put(N, K, lossless_tiles(gen_, N, K, shift - 1, shift)), {}, {}};
    p().gpu().quantize_output_weight(pr.w.gpu);
    const std::vector<float> acc = random_floats(gen_, M * N, -1, 1);
    pr.acc = p().put(M, N, acc);
    pr.acc_start = p().put(M, N, acc);
    return pr;
  }
  // acc after the FP8 product against the reference from the bf16 path's input x16 [M, K].
  void check(const std::string& op, const Projection& pr, const Pair::Buf& x16, int64_t M,
             int64_t K) {
    const int64_t N = pr.w.gpu.rows;
    expect_rms(op, p().got(pr.acc),
               fp8_block_product(p().got(pr.acc_start), p().got(x16), p().got(pr.w), M, N, K),
               kTolFp8Blocks, cat("M ", M, " N ", N, " K ", K));
  }
};

TEST_P(CudaFp8Blocks, SwigluIntoTheDownProjection) {
  for (const auto& [M, N, K, H] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{300, 3584, 1024, 1024},
        {257, 256, 208, 256},
        {13, 128, 64, 128}}) {
    const double scale = 2.0 / std::sqrt(double(K));
    auto x = activations(M, K);
    auto wg = weight(N, K, scale), wu = weight(N, K, scale);
    Projection down = projection(M, H, N);
    auto act = p().poison(M, N), act16 = p().poison(M, N);
    Ops& gpu = p().gpu();
    EXPECT_EQ(ops_run(gpu,
                      [&] {
                        gpu.swiglu_into_product(x.gpu, wg.gpu, wu.gpu, act.gpu, down.w.gpu);
                        gpu.matmul_add(act.gpu, down.w.gpu, down.acc.gpu);
                      }),
              (std::set<std::string>{"quantize_fp8", "swiglu", "matmul_add_fp8"}));
    gpu.swiglu(x.gpu, wg.gpu, wu.gpu, act16.gpu);
    check("swiglu_into_product + matmul_add", down, act16, M, N);
  }
}

TEST_P(CudaFp8Blocks, ZGatedRmsnormIntoTheOutProjection) {
  for (const auto& [M, heads, K, H] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{300, 16, 1024, 1024}, {130, 2, 208, 256}}) {
    const int64_t D = 128, Vd = heads * D;
    auto h = activations(M, K);
    auto wz = weight(Vd, K, 3.0 / std::sqrt(double(K)));
    auto o = p().put(M, Vd, random_floats(gen_, M * Vd, -2, 1));
    auto w = p().put(1, D, random_floats(gen_, D, 0.5, 1.5));
    Projection out_proj = projection(M, H, Vd);
    auto out = p().poison(M, Vd), out16 = p().poison(M, Vd);
    Ops& gpu = p().gpu();
    EXPECT_EQ(ops_run(gpu,
                      [&] {
                        gpu.z_gated_rmsnorm_into_product(o.gpu, h.gpu, wz.gpu, w.gpu, out.gpu, 1e-6,
                                                         out_proj.w.gpu);
                        gpu.matmul_add(out.gpu, out_proj.w.gpu, out_proj.acc.gpu);
                      }),
              (std::set<std::string>{"quantize_fp8", "z_gated_rmsnorm", "matmul_add_fp8"}));
    gpu.z_gated_rmsnorm(o.gpu, h.gpu, wz.gpu, w.gpu, out16.gpu, 1e-6);
    check("z_gated_rmsnorm_into_product + matmul_add", out_proj, out16, M, Vd);
  }
}

// A product weight without the tile copy: the producer writes bf16, and the product runs on it,
// as swiglu then matmul_add do. Reading the FP8-only output with another weight is an error
// that names it.
TEST_P(CudaFp8Blocks, WithoutTheTileCopyTheOutputIsBf16AndAnotherWeightIsRefused) {
  const int64_t M = 200, N = 256, K = 128, H = 128;
  auto x = activations(M, K);
  auto wg = weight(N, K, 0.1), wu = weight(N, K, 0.1);
  const std::vector<float> wd_values = random_floats(gen_, H * N, -0.1, 0.1);
  auto plain = p().put(H, N, wd_values), tiled = p().put(H, N, wd_values);
  p().gpu().quantize_output_weight(tiled.gpu);
  const std::vector<float> acc_values = random_floats(gen_, M * H, -1, 1);
  auto acc = p().put(M, H, acc_values), acc16 = p().put(M, H, acc_values);
  auto act = p().poison(M, N), act16 = p().poison(M, N);
  Ops& gpu = p().gpu();
  EXPECT_EQ(ops_run(gpu,
                    [&] {
                      gpu.swiglu_into_product(x.gpu, wg.gpu, wu.gpu, act.gpu, plain.gpu);
                      gpu.matmul_add(act.gpu, plain.gpu, acc.gpu);
                    }),
            (std::set<std::string>{"quantize_fp8", "swiglu", "matmul_add"}));
  gpu.swiglu(x.gpu, wg.gpu, wu.gpu, act16.gpu);
  gpu.matmul_add(act16.gpu, plain.gpu, acc16.gpu);
  expect_exact("swiglu_into_product without a tile copy", p().got(acc), p().got(acc16));

  gpu.swiglu_into_product(x.gpu, wg.gpu, wu.gpu, act.gpu, tiled.gpu);
  EXPECT_THROW(
      {
        try {
          gpu.matmul_add(act.gpu, plain.gpu, acc.gpu);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("holds only the FP8 form"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

INSTANTIATE_TEST_SUITE_P(Operands, CudaFp8Blocks, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Lossless" : "Random"; });

// A trunk of 1,200 rows and short questions: row tiles cut across nodes and levels.
std::vector<NodeSpec> trunk_and_questions() {
  std::vector<NodeSpec> nodes{NodeSpec{-1, 1200}};
  for (int i = 0; i < 6; ++i) nodes.push_back(NodeSpec{0, 40 + 13 * i});
  return nodes;
}

TEST_P(CudaFp8, GdnQkvConv) {
  const int64_t Dk = 128, heads_k = 16, Kd = heads_k * Dk, Vd = 2048, C = 2 * Kd + Vd, H = 1024;
  const int64_t W = 3 * C;
  const Stream s = build_stream(trunk_and_questions(), 0, gen_);
  const int64_t T = s.n_tokens(), slots = std::max(s.n_slots, 1);
  p().set_stream(s);
  auto x = activations(T, H);
  auto wq = weight(C, H, 2.0 / std::sqrt(double(H)));
  auto w = p().put(C, 4, random_floats(gen_, C * 4, -1, 1));
  Ops& gpu = p().gpu();
  const auto w_conv_of = [&](const Ops& ops) { return &ops == &gpu ? w.gpu : w.cpu; };
  // q, k, v and the windows (zeroed, outside the profiled op).
  const auto outputs = [&](Ops& ops) {
    std::array<View, 4> outs{ops.alloc(T, Kd), ops.alloc(T, Kd), ops.alloc(T, Vd),
                             ops.alloc(slots, W)};
    ops.fill_zero(outs[3]);
    return outs;
  };
  const auto run = [&](Ops& ops, const std::array<View, 4>& outs, View x_v, View w_qkv) {
    ops.gdn_qkv_conv(x_v, w_qkv, w_conv_of(ops), outs[3], outs[0], outs[1], outs[2], int(Dk), 1e-6,
                     s.n_levels());
  };
  const auto fp8_outs = outputs(gpu), bf16_outs = outputs(gpu), ref_outs = outputs(p().cpu());
  EXPECT_EQ(ops_run(gpu, [&] { run(gpu, fp8_outs, x.gpu, wq.gpu); }),
            (std::set<std::string>{"quantize_fp8", "gdn_qkv_conv"}));
  run(gpu, bf16_outs, x.gpu, unquantized_twin(p(), wq).gpu);
  run(p().cpu(), ref_outs, x.cpu, wq.cpu);
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const Pair::Buf out{fp8_outs[i], ref_outs[i]};
    check(cat("gdn_qkv_conv ", names[i]), out, p().got(bf16_outs[i]), cat("T ", T));
  }
}

TEST_P(CudaFp8, AttentionProjections) {
  const int hq = 8, hkv = 2, hd = 256, rot = 64;
  const int64_t K = 1024, Cq = int64_t(hq) * hd, Ckv = int64_t(hkv) * hd;
  const Stream s = build_stream(trunk_and_questions(), 0, gen_);
  const int64_t T = s.n_tokens();
  p().set_stream(s);
  const double ws = 2.0 / std::sqrt(double(K)), theta = 1e7, eps = 1e-6;
  auto h = activations(T, K);
  auto wq = weight(2 * Cq, K, ws), wk = weight(Ckv, K, ws), wv = weight(Ckv, K, ws);
  auto qn = p().put(1, hd, random_floats(gen_, hd, -0.5, 0.5));
  auto kn = p().put(1, hd, random_floats(gen_, hd, -0.5, 0.5));
  Ops& gpu = p().gpu();
  const auto run = [&](Ops& ops, View h_v, View q_w, View k_w, View v_w, View q_n, View k_n) {
    std::array<View, 4> outs{ops.alloc(T, Cq), ops.alloc(T, Cq), ops.alloc(T, Ckv),
                             ops.alloc(T, Ckv)};
    ops.attention_projections(h_v, q_w, k_w, v_w, q_n, k_n, outs[0], outs[1], outs[2], outs[3], hq,
                              hkv, hd, rot, theta, eps);
    return outs;
  };
  std::array<View, 4> fp8_outs;
  EXPECT_EQ(
      ops_run(gpu, [&] { fp8_outs = run(gpu, h.gpu, wq.gpu, wk.gpu, wv.gpu, qn.gpu, kn.gpu); }),
      (std::set<std::string>{"quantize_fp8", "attention_projections"}));
  const auto bf16_outs =
      run(gpu, h.gpu, unquantized_twin(p(), wq).gpu, unquantized_twin(p(), wk).gpu,
          unquantized_twin(p(), wv).gpu, qn.gpu, kn.gpu);
  const auto ref_outs = run(p().cpu(), h.cpu, wq.cpu, wk.cpu, wv.cpu, qn.cpu, kn.cpu);
  const char* names[4] = {"q", "gate", "k", "v"};
  for (int i = 0; i < 4; ++i) {
    const Pair::Buf out{fp8_outs[i], ref_outs[i]};
    check(cat("attention_projections ", names[i]), out, p().got(bf16_outs[i]), cat("T ", T));
  }
}

// The norm that feeds the products writes their FP8 form in its own pass: its bf16 output is
// rmsnorm's, bit for bit, and the product that reads that form gives the bits it gives after a
// plain rmsnorm and the separate quantization (the same arithmetic). Hidden sizes of a warp a row
// (1,024: four chunks a lane; 512: two) take the fused pass, 2,560 the two launches.
TEST_P(CudaFp8, NormIntoProductsMatchesNormThenQuantize) {
  Ops& gpu = p().gpu();
  for (const int64_t H : {int64_t(1024), int64_t(512), int64_t(2560)}) {
    const int64_t M = 300, N = 256;
    auto x = p().put(M, H, random_floats(gen_, M * H, -2, 2));
    auto w = p().put(1, H, random_floats(gen_, H, -0.5, 0.5));
    auto wg = weight(N, H, 2.0 / std::sqrt(double(H))),
         wu = weight(N, H, 2.0 / std::sqrt(double(H)));
    View h_fused = gpu.alloc(M, H), h_plain = gpu.alloc(M, H);
    View out_fused = gpu.alloc(M, N), out_plain = gpu.alloc(M, N);
    const bool fused = kernels::rmsnorm_fp8_supported(x.gpu.data, w.gpu.data, h_fused.data, H);
    EXPECT_EQ(fused, H <= 1024) << "H " << H;
    const auto ran = ops_run(gpu, [&] {
      gpu.rmsnorm_into_products(x.gpu, w.gpu, h_fused, 1e-6, true);
      gpu.swiglu(h_fused, wg.gpu, wu.gpu, out_fused);
    });
    const std::set<std::string> expected =
        fused ? std::set<std::string>{"rmsnorm_fp8", "swiglu"}
              : std::set<std::string>{"rmsnorm", "quantize_fp8", "swiglu"};
    EXPECT_EQ(ran, expected);
    gpu.rmsnorm(x.gpu, w.gpu, h_plain, 1e-6, true);
    gpu.swiglu(h_plain, wg.gpu, wu.gpu, out_plain);
    const std::string context = cat("H ", H);
    expect_exact("rmsnorm_into_products against rmsnorm", p().got(h_fused), p().got(h_plain),
                 context);
    expect_exact("swiglu after rmsnorm_into_products against after rmsnorm", p().got(out_fused),
                 p().got(out_plain), context);
  }
}

INSTANTIATE_TEST_SUITE_P(Operands, CudaFp8, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Lossless" : "Random"; });

}  // namespace
}  // namespace flide::test
