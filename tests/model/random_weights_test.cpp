// Random weights (model/random_weights.h): deterministic values independent of how the work is
// chunked, the documented distributions, the shapes of a real config (golden_gqa: the same
// parameter count as its checkpoint), a forward with finite, spread-out logits, and
// Model::gemm_shapes equal to the matmuls the forward really makes.
#include "model/random_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "model/model.h"

namespace flide {
namespace {

const std::filesystem::path kGolden =
    std::filesystem::path(FLIDE_SOURCE_DIR) / "tests/data/golden_gqa";

struct Moments {
  double mean = 0, std = 0, min = 1e300, max = -1e300;
};

Moments moments(const std::vector<float>& v) {
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.min = std::min(m.min, double(x));
    m.max = std::max(m.max, double(x));
  }
  m.mean /= double(v.size());
  for (float x : v) m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / double(v.size()));
  return m;
}

TEST(RandomWeightsTest, DeterministicPerSeedAndName) {
  const RandomWeights a(7, false), b(7, false), c(8, false);
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  const std::vector<float> va = a.read_f32(name, {96, 48});
  EXPECT_EQ(va, b.read_f32(name, {96, 48}));
  EXPECT_NE(va, c.read_f32(name, {96, 48}));
  EXPECT_NE(va, a.read_f32("model.layers.1.mlp.up_proj.weight", {96, 48}));
  // Values depend on the element index only: a short fill is the prefix of a long, chunked and
  // parallel one, odd lengths included.
  const uint64_t key = random_tensor_key(3, "x");
  std::vector<float> small(1001), large(300001);
  fill_uniform(small.data(), int64_t(small.size()), key, 0.0f, 1.0f);
  fill_uniform(large.data(), int64_t(large.size()), key, 0.0f, 1.0f);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), large.begin()));
  const Moments m = moments(large);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.std, 1.0 / std::sqrt(3.0), 0.01);
  EXPECT_GE(m.min, -1.0);
  EXPECT_LT(m.max, 1.0);
}

TEST(RandomWeightsTest, DistributionsByName) {
  const RandomWeights w(1, false);
  const Moments linear = moments(w.read_f32("model.layers.0.mlp.down_proj.weight", {64, 512}));
  EXPECT_NEAR(linear.std, 1.0 / std::sqrt(512.0), 0.02 / std::sqrt(512.0));  // unit gain
  EXPECT_LE(linear.max, std::sqrt(3.0 / 512.0));
  const Moments conv = moments(w.read_f32("model.layers.0.linear_attn.conv1d.weight", {512, 1, 4}));
  EXPECT_LE(conv.max, std::sqrt(3.0 / 4.0));  // fan_in = kernel width
  EXPECT_GT(conv.max, 0.8 * std::sqrt(3.0 / 4.0));
  const Moments norm = moments(w.read_f32("model.layers.0.input_layernorm.weight", {4096}));
  EXPECT_NEAR(norm.mean, 0.0, 0.01);
  EXPECT_NEAR(norm.std, 0.1, 0.01);
  const Moments gated = moments(w.read_f32("model.layers.0.linear_attn.norm.weight", {4096}));
  EXPECT_NEAR(gated.mean, 1.0, 0.01);
  EXPECT_NEAR(gated.std, 0.1, 0.01);
  const Moments a_log = moments(w.read_f32("model.layers.0.linear_attn.A_log", {4096}));
  EXPECT_GE(a_log.min, 0.0);
  EXPECT_LE(a_log.max, std::log(16.0));
  const Moments dt = moments(w.read_f32("model.layers.0.linear_attn.dt_bias", {4096}));
  EXPECT_GE(dt.min, -4.0);
  EXPECT_LE(dt.max, 0.5);
  EXPECT_NEAR(dt.mean, -1.75, 0.1);
  const Moments embed = moments(w.read_f32("model.embed_tokens.weight", {100, 64}));
  EXPECT_NEAR(embed.std, 0.02, 0.002);
}

TEST(RandomWeightsTest, TextOnlyLayoutAndTying) {
  EXPECT_TRUE(RandomWeights(0, false).has("lm_head.weight"));
  EXPECT_FALSE(RandomWeights(0, true).has("lm_head.weight"));
  EXPECT_TRUE(RandomWeights(0, true).has("model.embed_tokens.weight"));
  EXPECT_FALSE(RandomWeights(0, true).has("model.language_model.embed_tokens.weight"));
  EXPECT_THROW(RandomWeights(0, true).read_f32("lm_head.weight", {4, 4}), Error);
}

// The golden checkpoint's config with random weights: the same tensors and shapes as the file.
TEST(RandomWeightsTest, ShapesOfTheConfig) {
  auto ops = make_cpu_ops(DType::DType_f32, 2);
  auto random = load_model_random(kGolden / "config.json", *ops, 0);
  auto ops_file = make_cpu_ops(DType::DType_f32, 2);
  auto loaded = load_model(kGolden, *ops_file);
  EXPECT_EQ(random->info().n_params, loaded->info().n_params);
  EXPECT_EQ(random->info().vocab_size, 300);
  EXPECT_EQ(random->info().n_layers, 4);

  // Tied: no LM head of its own.
  std::ifstream file(kGolden / "config.json");
  nlohmann::json config = nlohmann::json::parse(file);
  config["tie_word_embeddings"] = true;
  auto ops_tied = make_cpu_ops(DType::DType_f32, 2);
  auto tied_model = load_model_random_from_json(config, *ops_tied, 0);
  EXPECT_EQ(tied_model->info().n_params, loaded->info().n_params - 300 * 48);

  EXPECT_THROW(load_model_random(kGolden, *ops, 0), Error);  // a directory, not the file
  EXPECT_THROW(load_model_random(kGolden / "missing.json", *ops, 0), Error);
  // A string names a file, as a path does.
  EXPECT_THROW(load_model_random((kGolden / "missing.json").string(), *ops, 0), Error);
  EXPECT_EQ(load_model_random((kGolden / "config.json").string(), *ops, 0)->info().n_params,
            loaded->info().n_params);
}

Stream one_sequence(int32_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  Stream s;
  for (int32_t t = 0; t < n; ++t) {
    s.token_ids.push_back(int32_t(rng() % uint32_t(vocab)));
    s.positions.push_back(t);
    s.token_node.push_back(0);
  }
  s.nodes.push_back({-1, 0, n, 0, -1, -1});
  s.level_begin = {0, 1};
  s.out_rows = {n - 1};
  s.n_full_out = 1;
  return s;
}

TEST(RandomWeightsTest, ForwardGivesFiniteSpreadLogits) {
  auto ops = make_cpu_ops(DType::DType_f32, 2);
  auto model = load_model_random(kGolden / "config.json", *ops, 42);
  const ReadoutLogits out = model->forward(one_sequence(40, 300, 1));
  ASSERT_EQ(out.full.size(), 300u);
  for (double x : out.full) ASSERT_TRUE(std::isfinite(x));
  const Moments m = moments(std::vector<float>(out.full.begin(), out.full.end()));
  // Unit-gain linears and an untied U(+-sqrt(3/H)) head give logits of order one.
  EXPECT_GT(m.std, 0.1);
  EXPECT_LT(m.std, 10.0);
  // Another seed, another model.
  auto ops2 = make_cpu_ops(DType::DType_f32, 2);
  auto model2 = load_model_random(kGolden / "config.json", *ops2, 43);
  EXPECT_NE(model2->forward(one_sequence(40, 300, 1)).full, out.full);
}

// Ops that record the shape of every matmul and pass everything to the CPU backend.
class MatmulRecorder final : public Ops {
 public:
  explicit MatmulRecorder(Ops& inner) : in_(inner) {}
  std::vector<GemmShape> calls;

  DType dtype() const override { return in_.dtype(); }
  View alloc(int64_t r, int64_t c) override { return in_.alloc(r, c); }
  View scratch(int64_t r, int64_t c) override { return in_.scratch(r, c); }
  View scratch_f32(int64_t r, int64_t c) override { return in_.scratch_f32(r, c); }
  void reset_scratch() override { in_.reset_scratch(); }
  ScratchMark scratch_mark() const override { return in_.scratch_mark(); }
  void scratch_rewind(const ScratchMark& m) override { in_.scratch_rewind(m); }
  void upload(View d, const float* s) override { in_.upload(d, s); }
  void download(View s, double* d) override { in_.download(s, d); }
  void fill_zero(View d) override { in_.fill_zero(d); }
  void set_stream(const Stream& s) override { in_.set_stream(s); }
  void synchronize() override { in_.synchronize(); }
  void embed(View t, View o) override { in_.embed(t, o); }
  void rmsnorm(View x, View w, View o, double e, bool u) override { in_.rmsnorm(x, w, o, e, u); }
  void matmul(View x, View w, View o) override {
    calls.push_back({x.rows, w.rows, x.cols});
    in_.matmul(x, w, o);
  }
  void matmul_add(View x, View w, View acc) override {
    calls.push_back({x.rows, w.rows, x.cols});
    in_.matmul_add(x, w, acc);
  }
  void silu_mul(View g, View u, View o) override { in_.silu_mul(g, u, o); }
  void sigmoid_mul(View x, View g) override { in_.sigmoid_mul(x, g); }
  void gather_rows(View x, View o) override { in_.gather_rows(x, o); }
  void attention_query(View qg, View n, View q, View g, Rows w, int h, int d, int r, double t,
                       double e) override {
    in_.attention_query(qg, n, q, g, w, h, d, r, t, e);
  }
  void attention_key(View k, View n, int h, int d, int r, double t, double e) override {
    in_.attention_key(k, n, h, d, r, t, e);
  }
  void attention(View q, View k, View v, View o, Rows w, int hq, int hk, int d, double s) override {
    in_.attention(q, k, v, o, w, hq, hk, d, s);
  }
  void gdn_conv(View x, View w, View win, View q, View k, View v, int dk, double e,
                int l) override {
    in_.gdn_conv(x, w, win, q, k, v, dk, e, l);
  }
  void gdn_gates(View ab, View A, View dt, View g, View beta) override {
    in_.gdn_gates(ab, A, dt, g, beta);
  }
  void gdn(View q, View k, View v, View g, View b, View st, View o, int l, int hk, int hv, int dk,
           int dv, GdnForm f) override {
    in_.gdn(q, k, v, g, b, st, o, l, hk, hv, dk, dv, f);
  }
  void gated_rmsnorm(View o, View z, View w, View out, double e) override {
    in_.gated_rmsnorm(o, z, w, out, e);
  }
  void select_logits(View h, View w, View o) override { in_.select_logits(h, w, o); }

 private:
  Ops& in_;
};

TEST(RandomWeightsTest, GemmShapesMirrorTheForward) {
  auto cpu = make_cpu_ops(DType::DType_f32, 2);
  MatmulRecorder ops(*cpu);
  auto model = load_model_random(kGolden / "config.json", ops, 5);
  // A trunk with two children; out rows at both children, one full row.
  Stream s = one_sequence(12, 300, 2);
  s.nodes[0].slot_out = 0;
  s.n_slots = 1;
  for (int32_t child = 0; child < 2; ++child) {
    s.nodes.push_back({0, 12 + 3 * child, 3, 1, 0, -1});
    for (int32_t t = 0; t < 3; ++t) {
      s.token_ids.push_back(7 + t);
      s.positions.push_back(12 + t);
      s.token_node.push_back(1 + child);
    }
  }
  s.level_begin = {0, 1, 3};
  s.out_rows = {14, 17};
  s.n_full_out = 1;
  s.select_out = {1, 1};
  s.select_ids = {3, 4};
  const std::vector<GemmShape> expected = model->gemm_shapes(s);
  ops.calls.clear();
  model->forward(s);
  ASSERT_EQ(ops.calls.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(ops.calls[i].m, expected[i].m) << "call " << i;
    EXPECT_EQ(ops.calls[i].n, expected[i].n) << "call " << i;
    EXPECT_EQ(ops.calls[i].k, expected[i].k) << "call " << i;
  }
  EXPECT_EQ(expected.size(), 3u * 7 + 7 + 1);  // 3 GDN layers, 1 attention layer, full head
}

}  // namespace
}  // namespace flide
