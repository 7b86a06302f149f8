// Typed Qwen3.5 text configuration from a Hugging Face config.json: the flat
// Qwen3_5ForCausalLM layout or the multimodal Qwen3_5ForConditionalGeneration one (text keys
// under "text_config"; vision keys ignored). Every size comes from here; nothing is assumed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace flide {

enum class LayerType : uint8_t { LayerType_linear_attention, LayerType_full_attention };

struct Qwen35Config {
  std::string architecture;  // "Qwen3_5ForCausalLM" or "Qwen3_5ForConditionalGeneration"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  // full (gated) attention layers
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double rope_theta = 10000000.0;
  double partial_rotary_factor = 0.25;
  // Gated DeltaNet layers
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;    // informational: tying is decided by lm_head.weight presence
  std::vector<LayerType> layer_types;  // [num_hidden_layers]
  std::vector<int32_t> eos_token_ids;  // text_config's and top level's, deduplicated

  int64_t rotary_dim() const { return int64_t(double(head_dim) * partial_rotary_factor); }

  // Errors (flide::Error) name the key: missing, wrong type, non-positive, inconsistent
  // (heads not dividing, layer_types length, unknown layer type, unsupported architecture,
  // hidden_act other than silu).
  static Qwen35Config parse(const nlohmann::json& config_json);
  static Qwen35Config load(const std::filesystem::path& model_dir);  // <dir>/config.json
};

}  // namespace flide
