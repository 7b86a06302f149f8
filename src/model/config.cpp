// Qwen35Config from config.json. Follows HF Qwen3_5TextConfig: text keys come from
// "text_config" when present (multimodal checkpoints) else from the top level; the defaults
// below are HF's. Every error names the key as a dotted path ("text_config.hidden_size") so a
// user can find it in the file.
#include "model/config.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"

namespace flide {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& key, const std::string& what) {
  throw Error(cat("config.json: \"", key, "\" ", what));
}

// The offending value, shortened so a long list does not flood the message.
std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// One JSON object of config.json and the dotted prefix of its keys, for messages.
struct Section {
  const json& obj;
  std::string prefix;

  std::string key(const std::string& name) const { return prefix + name; }
  // null counts as absent: HF writes unset optional keys as null.
  const json* find(const std::string& name) const {
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
};

int64_t positive_int(const json& v, const std::string& key) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    fail(key, cat("must be a positive integer (got ", shown(v), ")"));
  return v.get<int64_t>();
}

int64_t required_positive_int(const Section& s, const std::string& name) {
  const json* v = s.find(name);
  if (!v) fail(s.key(name), "is missing (must be a positive integer)");
  return positive_int(*v, s.key(name));
}

double positive_number(const json& v, const std::string& key) {
  if (!v.is_number() || v.get<double>() <= 0)
    fail(key, cat("must be a positive number (got ", shown(v), ")"));
  return v.get<double>();
}

// `name` from rope_parameters (HF 5.x) or, for older configs, from the text config itself.
const json* rope_value(const Section& tc, const std::optional<Section>& rope,
                       const std::string& name, std::string& key) {
  if (rope) {
    if (const json* v = rope->find(name)) {
      key = rope->key(name);
      return v;
    }
  }
  key = tc.key(name);
  return tc.find(name);
}

// The engine implements plain RoPE only; a scaled variant (yarn, linear, ...) would silently
// give wrong logits, so it is refused. "mrope" is plain RoPE for text-only input (spec §1.3).
void check_rope_type(const Section& s) {
  for (const char* name : {"rope_type", "type"}) {
    const json* v = s.find(name);
    if (v && !(v->is_string() && (*v == "default" || *v == "mrope")))
      fail(s.key(name),
           cat("must be \"default\" (got ", shown(*v), "); RoPE scaling is not supported"));
  }
}

std::vector<LayerType> parse_layer_types(const Section& tc, int64_t n_layers) {
  std::vector<LayerType> out;
  if (const json* v = tc.find("layer_types")) {
    const std::string key = tc.key("layer_types");
    if (!v->is_array()) fail(key, cat("must be a list of layer types (got ", shown(*v), ")"));
    if (int64_t(v->size()) != n_layers)
      fail(key, cat("has ", v->size(), " entries but num_hidden_layers is ", n_layers));
    for (size_t i = 0; i < v->size(); ++i) {
      const json& t = (*v)[i];
      // "attention" and "mamba" are the legacy spellings HF's remap_legacy_layer_types accepts.
      if (t == "full_attention" || t == "attention")
        out.push_back(LayerType::LayerType_full_attention);
      else if (t == "linear_attention" || t == "mamba")
        out.push_back(LayerType::LayerType_linear_attention);
      else
        fail(cat(key, "[", i, "]"),
             cat("must be \"linear_attention\" or \"full_attention\" (got ", shown(t), ")"));
    }
    return out;
  }
  int64_t interval = 4;  // HF default
  if (const json* v = tc.find("full_attention_interval"))
    interval = positive_int(*v, tc.key("full_attention_interval"));
  for (int64_t i = 0; i < n_layers; ++i)
    out.push_back((i + 1) % interval == 0 ? LayerType::LayerType_full_attention
                                          : LayerType::LayerType_linear_attention);
  return out;
}

void add_eos_ids(const Section& s, std::vector<int32_t>& out) {
  const json* v = s.find("eos_token_id");
  if (!v) return;
  auto add = [&](const json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail(s.key("eos_token_id"),
           cat("must be a token id or a list of them (got ", shown(*v), ")"));
    const int32_t tok = int32_t(id.get<int64_t>());
    if (std::find(out.begin(), out.end(), tok) == out.end()) out.push_back(tok);
  };
  if (v->is_array()) {
    for (const json& id : *v) add(id);
  } else {
    add(*v);
  }
}

}  // namespace

Qwen35Config Qwen35Config::parse(const nlohmann::json& cfg) {
  if (!cfg.is_object()) throw Error("config.json: the top level must be a JSON object");
  const Section top{cfg, ""};
  const json* text = top.find("text_config");
  if (text && !text->is_object()) fail("text_config", "must be a JSON object");
  const Section tc = text ? Section{*text, "text_config."} : top;

  Qwen35Config c;
  const json* archs = top.find("architectures");
  if (!archs || !archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    fail("architectures", "must be a non-empty list of class names");
  c.architecture = (*archs)[0].get<std::string>();
  if (c.architecture != "Qwen3_5ForCausalLM" && c.architecture != "Qwen3_5ForConditionalGeneration")
    fail("architectures", cat("names ", c.architecture,
                              "; supported: Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration"));

  c.vocab_size = required_positive_int(tc, "vocab_size");
  c.hidden_size = required_positive_int(tc, "hidden_size");
  c.intermediate_size = required_positive_int(tc, "intermediate_size");
  c.num_hidden_layers = required_positive_int(tc, "num_hidden_layers");
  c.num_attention_heads = required_positive_int(tc, "num_attention_heads");
  c.num_key_value_heads = required_positive_int(tc, "num_key_value_heads");
  c.head_dim = required_positive_int(tc, "head_dim");
  c.linear_num_key_heads = required_positive_int(tc, "linear_num_key_heads");
  c.linear_num_value_heads = required_positive_int(tc, "linear_num_value_heads");
  c.linear_key_head_dim = required_positive_int(tc, "linear_key_head_dim");
  c.linear_value_head_dim = required_positive_int(tc, "linear_value_head_dim");
  c.linear_conv_kernel_dim = required_positive_int(tc, "linear_conv_kernel_dim");

  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(tc.key("num_key_value_heads"),
         cat("(", c.num_key_value_heads, ") must divide num_attention_heads (",
             c.num_attention_heads, ")"));
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail(tc.key("linear_num_key_heads"),
         cat("(", c.linear_num_key_heads, ") must divide linear_num_value_heads (",
             c.linear_num_value_heads, ")"));

  if (const json* v = tc.find("rms_norm_eps"))
    c.rms_norm_eps = positive_number(*v, tc.key("rms_norm_eps"));
  if (const json* v = tc.find("hidden_act"); v && *v != "silu")
    fail(tc.key("hidden_act"), cat("must be \"silu\" (got ", shown(*v), ")"));

  std::optional<Section> rope;
  if (const json* v = tc.find("rope_parameters")) {
    if (!v->is_object()) fail(tc.key("rope_parameters"), "must be a JSON object");
    rope.emplace(Section{*v, tc.key("rope_parameters.")});
    check_rope_type(*rope);
  }
  if (const json* legacy = tc.find("rope_scaling")) {
    if (!legacy->is_object()) fail(tc.key("rope_scaling"), "must be a JSON object");
    check_rope_type(Section{*legacy, tc.key("rope_scaling.")});
  }
  std::string key;
  if (const json* v = rope_value(tc, rope, "rope_theta", key))
    c.rope_theta = positive_number(*v, key);
  if (const json* v = rope_value(tc, rope, "partial_rotary_factor", key)) {
    c.partial_rotary_factor = positive_number(*v, key);
    if (c.partial_rotary_factor > 1) fail(key, cat("must be in (0, 1] (got ", shown(*v), ")"));
  }
  if (c.rotary_dim() <= 0 || c.rotary_dim() % 2 != 0)
    fail(key, cat("gives rotary_dim ", c.rotary_dim(), " (head_dim ", c.head_dim,
                  " x factor); it must be even and positive"));

  c.layer_types = parse_layer_types(tc, c.num_hidden_layers);

  const json* tie = tc.find("tie_word_embeddings");
  std::string tie_key = tc.key("tie_word_embeddings");
  if (!tie) {
    tie = top.find("tie_word_embeddings");
    tie_key = "tie_word_embeddings";
  }
  if (tie) {
    if (!tie->is_boolean()) fail(tie_key, cat("must be true or false (got ", shown(*tie), ")"));
    c.tie_word_embeddings = tie->get<bool>();
  }

  // Chat generation must stop on both (spec §1.2): <|endoftext|> in text_config and
  // <|im_end|> at the top level of multimodal checkpoints.
  add_eos_ids(tc, c.eos_token_ids);
  if (text) add_eos_ids(top, c.eos_token_ids);
  return c;
}

Qwen35Config Qwen35Config::load(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "config.json";
  std::ifstream in(path);
  if (!in) throw Error(cat("cannot read ", path.string(), " (missing or unreadable)"));
  json cfg;
  try {
    cfg = json::parse(in);
  } catch (const json::exception& e) {
    throw Error(cat(path.string(), ": malformed JSON: ", e.what()));
  }
  return parse(cfg);
}

}  // namespace flide
