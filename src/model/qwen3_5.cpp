// Qwen3.5 dense text model: weight binding (from a WeightSource: a checkpoint or random
// weights) and the forward pass over a flat stream of decision trees, top to bottom. The math
// follows HF transformers' modeling_qwen3_5 (spec shared/specs/qwen3_5.md); the tree structure
// lives in the Stream, which ops read:
//   - attention: each query sees its ancestors' rows and its own node's earlier rows;
//   - Gated DeltaNet: conv and delta rule run one tree level at a time, each node starting
//     from its parent's state slot and writing its own when it has children;
//   - selective readout: the last layer keeps K/V and recurrent updates for every row but runs
//     its output projection, MLP, the final norm and the LM head only on Stream::out_rows, and
//     the LM head only on the requested token ids (plus full rows where asked).
#include "model/qwen3_5.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace flide {

namespace {

struct GdnWeights {
  View in_qkv;   // [C, H], rows q (Hk*Dk) | k (Hk*Dk) | v (Hv*Dv)
  View in_z;     // [Hv*Dv, H]
  View in_ab;    // [2 Hv, H]: in_proj_a's rows, then in_proj_b's (one product for both)
  View conv;     // [C, K]  (checkpoint [C, 1, K])
  View A_log;    // [1, Hv]
  View dt_bias;  // [1, Hv]
  View norm;     // [1, Dv], plain weight (not 1 + w)
  View out;      // [H, Hv*Dv]
};

struct AttentionWeights {
  View q;       // [heads * 2 * hd, H], per head [query | gate]
  View k;       // [heads_kv * hd, H]
  View v;       // [heads_kv * hd, H]
  View o;       // [H, heads * hd]
  View q_norm;  // [1, hd], zero-centred
  View k_norm;  // [1, hd], zero-centred
};

struct LayerWeights {
  LayerType type;
  View input_norm;  // [1, H], zero-centred
  View post_norm;   // [1, H], zero-centred
  GdnWeights gdn;
  AttentionWeights attn;
  View mlp_gate;  // [I, H]
  View mlp_up;    // [I, H]
  View mlp_down;  // [H, I]
};

// The checkpoint's tensor-name prefix of the text model: multimodal exports use
// "model.language_model.", text-only ones "model.", some converters "language_model.model.".
std::string text_prefix(const WeightSource& weights) {
  for (const char* prefix : {"model.language_model.", "model.", "language_model.model."})
    if (weights.has(std::string(prefix) + "embed_tokens.weight")) return prefix;
  throw Error(
      "no embed_tokens.weight under model.language_model., model. or language_model.model.");
}

// Reads each tensor into one reused host buffer (no fresh pages per tensor: the 9B embedding
// alone is 1e9 floats) and uploads it, converted to the backend's compute type.
class Binder {
 public:
  Binder(const WeightSource& weights, Ops& ops) : weights_(weights), ops_(ops) {}

  View bind(const std::string& name, std::vector<int64_t> shape) {
    return bind_stacked({name}, std::move(shape));
  }
  // Tensors of one shape stacked row-wise in one matrix [names.size() * shape[0], ...].
  View bind_stacked(const std::vector<std::string>& names, std::vector<int64_t> shape) {
    const int64_t n = numel(shape), total = n * int64_t(names.size());
    if (total > capacity_) {
      host_.reset(new float[size_t(total)]);
      capacity_ = total;
    }
    for (size_t i = 0; i < names.size(); ++i)
      weights_.read_into(names[i], shape, host_.get() + int64_t(i) * n);
    const int64_t rows = (shape.size() == 1 ? 1 : shape[0]) * int64_t(names.size());
    View view = ops_.alloc(rows, total / rows);
    ops_.upload(view, host_.get());
    n_params_ += total;
    return view;
  }
  int64_t n_params() const { return n_params_; }

 private:
  const WeightSource& weights_;
  Ops& ops_;
  std::unique_ptr<float[]> host_;  // [capacity_], contents of the last tensor read
  int64_t capacity_ = 0;
  int64_t n_params_ = 0;
};

class Qwen35Model final : public Model {
 public:
  Qwen35Model(const nlohmann::json& config, const WeightSource& weights, Ops& ops)
      : ops_(ops), cfg_(Qwen35Config::parse(config)) {
    const std::string p = text_prefix(weights);
    Binder b(weights, ops);
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, V = cfg_.vocab_size;
    const int64_t Kd = cfg_.linear_num_key_heads * cfg_.linear_key_head_dim;
    const int64_t Vd = cfg_.linear_num_value_heads * cfg_.linear_value_head_dim;
    const int64_t C = 2 * Kd + Vd, Hv = cfg_.linear_num_value_heads;
    const int64_t hd = cfg_.head_dim, nh = cfg_.num_attention_heads;
    const int64_t nkv = cfg_.num_key_value_heads;

    embed_ = b.bind(p + "embed_tokens.weight", {V, H});
    final_norm_ = b.bind(p + "norm.weight", {H});
    // Tied or untied is decided by the tensor's presence (official 0.8B-4B omit it).
    lm_head_ = weights.has("lm_head.weight") ? b.bind("lm_head.weight", {V, H}) : embed_;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string lp = p + "layers." + std::to_string(l) + ".";
      LayerWeights w;
      w.type = cfg_.layer_types[l];
      w.input_norm = b.bind(lp + "input_layernorm.weight", {H});
      w.post_norm = b.bind(lp + "post_attention_layernorm.weight", {H});
      w.mlp_gate = b.bind(lp + "mlp.gate_proj.weight", {I, H});
      w.mlp_up = b.bind(lp + "mlp.up_proj.weight", {I, H});
      w.mlp_down = b.bind(lp + "mlp.down_proj.weight", {H, I});
      if (w.type == LayerType::LayerType_linear_attention) {
        const std::string g = lp + "linear_attn.";
        w.gdn.in_qkv = b.bind(g + "in_proj_qkv.weight", {C, H});
        w.gdn.in_z = b.bind(g + "in_proj_z.weight", {Vd, H});
        w.gdn.in_ab = b.bind_stacked({g + "in_proj_a.weight", g + "in_proj_b.weight"}, {Hv, H});
        w.gdn.conv = b.bind(g + "conv1d.weight", {C, 1, cfg_.linear_conv_kernel_dim});
        w.gdn.A_log = b.bind(g + "A_log", {Hv});
        w.gdn.dt_bias = b.bind(g + "dt_bias", {Hv});
        w.gdn.norm = b.bind(g + "norm.weight", {cfg_.linear_value_head_dim});
        w.gdn.out = b.bind(g + "out_proj.weight", {H, Vd});
      } else {
        const std::string a = lp + "self_attn.";
        w.attn.q = b.bind(a + "q_proj.weight", {nh * hd * 2, H});
        w.attn.k = b.bind(a + "k_proj.weight", {nkv * hd, H});
        w.attn.v = b.bind(a + "v_proj.weight", {nkv * hd, H});
        w.attn.o = b.bind(a + "o_proj.weight", {H, nh * hd});
        w.attn.q_norm = b.bind(a + "q_norm.weight", {hd});
        w.attn.k_norm = b.bind(a + "k_norm.weight", {hd});
      }
      // The fused products' weights, and the output projections that read a fused product's
      // output, which a backend may also keep in lower precision (--quantization fp8); the
      // attention's output projection and the LM head stay as loaded.
      const bool gdn = w.type == LayerType::LayerType_linear_attention;
      for (const View& pw :
           gdn ? std::vector<View>{w.mlp_gate, w.mlp_up, w.gdn.in_qkv, w.gdn.in_z}
               : std::vector<View>{w.mlp_gate, w.mlp_up, w.attn.q, w.attn.k, w.attn.v})
        ops.quantize_weight(pw);
      ops.quantize_output_weight(w.mlp_down);
      if (gdn) ops.quantize_output_weight(w.gdn.out);
      layers_.push_back(w);
    }
    info_.architecture = cfg_.architecture;
    info_.vocab_size = V;
    info_.n_layers = cfg_.num_hidden_layers;
    info_.n_params = b.n_params();
    info_.eos_token_ids = cfg_.eos_token_ids;
  }

  const ModelInfo& info() const override { return info_; }

  bool asynchronous() const override { return ops_.asynchronous(); }
  void wait_tail() override { ops_.wait_tail(); }

  ReadoutLogits collect() override {
    FLIDE_CHECK(!in_flight_.empty(), "collect without a submitted round");
    InFlight round = std::move(in_flight_.front());
    in_flight_.pop_front();
    ReadoutLogits result;
    result.selected = ops_.fetch(round.selected);
    result.full = ops_.fetch(round.full);
    return result;
  }

  void submit(const Stream& s) override {
    FLIDE_CHECK(in_flight_.size() < 2, "two rounds are already in flight");
    FLIDE_CHECK(!s.out_rows.empty(), "a round must read at least one row");
    for (int32_t id : s.token_ids)
      if (id < 0 || id >= cfg_.vocab_size)
        throw Error(cat("token id ", id, " is outside the vocabulary [0, ", cfg_.vocab_size, ")"));
    ops_.reset_scratch();
    ops_.set_stream(s);
    stream_ = &s;
    const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size()), H = cfg_.hidden_size;

    const double eps = cfg_.rms_norm_eps;
    View x = ops_.scratch(T, H);   // residual stream [T, H]
    View xr = ops_.scratch(R, H);  // the out rows' residual from the last mixer on
    View h = ops_.scratch(T, H);   // the input norm of the residual: what the next mixer reads
    View hn = ops_.scratch(R, H);  // the final norm of the out rows
    ops_.embed(embed_, x);
    // The norms that feed the fused products say so (Ops::rmsnorm_into_products); the final norm
    // feeds the LM head.
    ops_.rmsnorm_into_products(x, layers_[0].input_norm, h, eps, true);
    // The last eighth of the layers (at least one) is the round's tail: long enough on the
    // device for the host to prepare the next round (a few percent of a round) while it runs.
    // A quarter or a half served no faster (bench/results/2026-12-02-served-power-tail.md).
    const size_t tail = layers_.size() - std::max<size_t>(1, layers_.size() / 8);
    // Each residual add is the epilogue of the product that feeds it (matmul_add): the mixer's
    // output projection, then the MLP's down projection.
    for (size_t l = 0; l < layers_.size(); ++l) {
      const LayerWeights& w = layers_[l];
      const bool last = l + 1 == layers_.size();
      if (l == tail) ops_.mark_tail();
      const ScratchMark layer_start = ops_.scratch_mark();  // the layer's temporaries after it
      if (last) {  // selective readout: from here on only the out rows
        ops_.gather_rows(x, xr);
        x = xr;
      }
      if (w.type == LayerType::LayerType_linear_attention)
        gated_deltanet(w.gdn, h, x, last);
      else
        attention(w.attn, h, x, last);
      View n = ops_.scratch(x.rows, H);
      ops_.rmsnorm_into_products(x, w.post_norm, n, eps, true);
      mlp(w, n, x);
      if (last)
        ops_.rmsnorm(x, final_norm_, hn, eps, true);
      else
        ops_.rmsnorm_into_products(x, layers_[l + 1].input_norm, h, eps, true);
      ops_.scratch_rewind(layer_start);
    }
    in_flight_.push_back(readout(s, hn));
  }

  // Mirrors submit, mlp, gated_deltanet, attention and readout: keep them in step.
  std::vector<GemmShape> gemm_shapes(const Stream& s) const override {
    const int64_t T = s.n_tokens(), R = int64_t(s.out_rows.size()), H = cfg_.hidden_size;
    const int64_t I = cfg_.intermediate_size;
    const int64_t Kd = cfg_.linear_num_key_heads * cfg_.linear_key_head_dim;
    const int64_t Vd = cfg_.linear_num_value_heads * cfg_.linear_value_head_dim;
    const int64_t Hv = cfg_.linear_num_value_heads, hd = cfg_.head_dim;
    const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
    std::vector<GemmShape> out;
    for (size_t l = 0; l < layers_.size(); ++l) {
      const int64_t rows = l + 1 == layers_.size() ? R : T;  // selective readout in the last
      if (layers_[l].type == LayerType::LayerType_linear_attention) {
        out.push_back({T, 2 * Kd + Vd, H});  // in_proj_qkv
        out.push_back({T, 2 * Hv, H});       // in_proj_a | in_proj_b
        out.push_back({rows, Vd, H});        // in_proj_z
        out.push_back({rows, H, Vd});        // out_proj
      } else {
        out.push_back({rows, nh * 2 * hd, H});  // q_proj (query | gate)
        out.push_back({T, nkv * hd, H});        // k_proj
        out.push_back({T, nkv * hd, H});        // v_proj
        out.push_back({rows, H, nh * hd});      // o_proj
      }
      out.push_back({rows, I, H});  // gate_proj
      out.push_back({rows, I, H});  // up_proj
      out.push_back({rows, H, I});  // down_proj
    }
    if (s.n_full_out > 0) out.push_back({s.n_full_out, cfg_.vocab_size, H});  // full LM head
    return out;
  }

 private:
  // x += down(silu(gate(n)) * up(n)) on the post-attention norm n [rows, H]; x [rows, H] is the
  // residual.
  void mlp(const LayerWeights& w, View n, View x) {
    View act = ops_.scratch(n.rows, cfg_.intermediate_size);
    ops_.swiglu_into_product(n, w.mlp_gate, w.mlp_up, act, w.mlp_down);
    ops_.matmul_add(act, w.mlp_down, x);
  }

  // Gated DeltaNet mixer on h [T, H], added to the residual x [T, H] (when `last`: [R, H], the
  // out rows).
  void gated_deltanet(const GdnWeights& w, View h, View x, bool last) {
    const Stream& s = *stream_;
    const int64_t T = h.rows, H = cfg_.hidden_size;
    const int Hk = int(cfg_.linear_num_key_heads), Hv = int(cfg_.linear_num_value_heads);
    const int Dk = int(cfg_.linear_key_head_dim), Dv = int(cfg_.linear_value_head_dim);
    const int64_t Kd = int64_t(Hk) * Dk, Vd = int64_t(Hv) * Dv, C = 2 * Kd + Vd;
    const int64_t K = cfg_.linear_conv_kernel_dim;

    // Slots hold each parent node's conv window and recurrent state for its children.
    View window = ops_.scratch(std::max(s.n_slots, 1), (K - 1) * C);
    View state = ops_.scratch_f32(std::max(s.n_slots, 1), int64_t(Hv) * Dk * Dv);
    View q = ops_.scratch(T, Kd), k = ops_.scratch(T, Kd), v = ops_.scratch(T, Vd);
    ops_.gdn_qkv_conv(h, w.in_qkv, w.conv, window, q, k, v, Dk, 1e-6, s.n_levels());
    View ab = ops_.scratch(T, 2 * int64_t(Hv));
    ops_.matmul(h, w.in_ab, ab);
    View g = ops_.scratch_f32(T, Hv), beta = ops_.scratch_f32(T, Hv);
    ops_.gdn_gates(ab, w.A_log, w.dt_bias, g, beta);

    View o = ops_.scratch(T, Vd);
    for (int level = 0; level < s.n_levels(); ++level)
      ops_.gdn(q, k, v, g, beta, state, o, level, Hk, Hv, Dk, Dv, GdnForm::GdnForm_chunked);

    View hz = h;  // the gate z and the output projection only where the output is read
    if (last) {
      const int64_t R = int64_t(s.out_rows.size());
      View o_rows = ops_.scratch(R, Vd);
      ops_.gather_rows(o, o_rows);
      o = o_rows;
      hz = ops_.scratch(R, H);
      ops_.gather_rows(h, hz);
    }
    View normed = ops_.scratch(hz.rows, Vd);
    ops_.z_gated_rmsnorm_into_product(o, hz, w.in_z, w.norm, normed, cfg_.rms_norm_eps, w.out);
    ops_.matmul_add(normed, w.out, x);
  }

  // Gated attention mixer on h [T, H], added to the residual x [T, H] (when `last`: [R, H], the
  // out rows).
  void attention(const AttentionWeights& w, View h, View x, bool last) {
    const Stream& s = *stream_;
    const int64_t T = h.rows, H = cfg_.hidden_size;
    const int nh = int(cfg_.num_attention_heads), nkv = int(cfg_.num_key_value_heads);
    const int hd = int(cfg_.head_dim), rot = int(cfg_.rotary_dim());
    const double theta = cfg_.rope_theta, eps = cfg_.rms_norm_eps;
    const double scale = 1.0 / std::sqrt(double(hd));
    View k = ops_.scratch(T, int64_t(nkv) * hd), v = ops_.scratch(T, int64_t(nkv) * hd);
    View attn = ops_.scratch(last ? int64_t(s.out_rows.size()) : T, int64_t(nh) * hd);
    if (last) {  // queries only where the output is read
      View hq = ops_.scratch(attn.rows, H);
      ops_.gather_rows(h, hq);
      View qg = ops_.scratch(attn.rows, int64_t(nh) * 2 * hd);
      ops_.matmul(hq, w.q, qg);
      ops_.matmul(h, w.k, k);
      ops_.matmul(h, w.v, v);
      ops_.attention_key(k, w.k_norm, nkv, hd, rot, theta, eps);
      ops_.gated_attention(qg, w.q_norm, k, v, attn, Rows::Rows_out, nh, nkv, hd, rot, theta, eps,
                           scale);
    } else {
      View q = ops_.scratch(T, int64_t(nh) * hd), gate = ops_.scratch(T, int64_t(nh) * hd);
      ops_.attention_projections(h, w.q, w.k, w.v, w.q_norm, w.k_norm, q, gate, k, v, nh, nkv, hd,
                                 rot, theta, eps);
      ops_.attention_gated(q, gate, k, v, attn, Rows::Rows_all, nh, nkv, hd, scale);
    }
    ops_.matmul_add(attn, w.o, x);
  }

  // A submitted round's readouts on their way to the host.
  struct InFlight {
    Readback selected;
    Readback full;
  };

  // LM head on the normed out rows hn [R, H]: the selected ids, and full rows where asked.
  InFlight readout(const Stream& s, View hn) {
    InFlight round;
    if (!s.select_ids.empty()) {
      View sel = ops_.scratch_f32(int64_t(s.select_ids.size()), 1);
      ops_.select_logits(hn, lm_head_, sel);
      round.selected = ops_.download_async(sel);
    }
    if (s.n_full_out > 0) {
      const int64_t F = s.n_full_out, V = cfg_.vocab_size;
      View logits = ops_.scratch_f32(F, V);
      ops_.matmul(hn.first_rows(F), lm_head_, logits);
      round.full = ops_.download_async(logits);
    }
    return round;
  }

  Ops& ops_;
  Qwen35Config cfg_;
  ModelInfo info_;
  View embed_;       // [V, H]
  View final_norm_;  // [1, H], zero-centred
  View lm_head_;     // [V, H]; the embedding when tied
  std::vector<LayerWeights> layers_;
  const Stream* stream_ = nullptr;  // the round being submitted
  std::deque<InFlight> in_flight_;  // submitted, not yet collected (oldest first)
};

}  // namespace

std::unique_ptr<Model> load_qwen3_5(const nlohmann::json& config, const WeightSource& weights,
                                    Ops& ops) {
  return std::make_unique<Qwen35Model>(config, weights, ops);
}

}  // namespace flide
