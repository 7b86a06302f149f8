// Models of the 0.8B model's widths (hidden 1,024, MLP 3,584, 16 key heads of 128, 8 query heads
// of 256: the kernels the real sizes run) with a 4,096-token vocabulary, a few layers of the
// caller's types and random weights, for the GPU tests of whole rounds.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/model.h"

namespace flide::test {

// layer_types: the config's JSON list, e.g. R"(["linear_attention", "full_attention"])".
inline std::unique_ptr<Model> load_real_widths_model(const std::string& layer_types, Ops& ops,
                                                     uint64_t seed) {
  const nlohmann::json types = nlohmann::json::parse(layer_types);
  const nlohmann::json text_config = {
      {"architectures", {"Qwen3_5ForCausalLM"}},
      {"model_type", "qwen3_5_text"},
      {"dtype", "bfloat16"},
      {"vocab_size", 4096},
      {"hidden_size", 1024},
      {"intermediate_size", 3584},
      {"num_hidden_layers", types.size()},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 2},
      {"head_dim", 256},
      {"hidden_act", "silu"},
      {"max_position_embeddings", 262144},
      {"rms_norm_eps", 1e-06},
      {"tie_word_embeddings", true},
      {"rope_parameters",
       {{"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}, {"rope_type", "default"}}},
      {"linear_conv_kernel_dim", 4},
      {"linear_key_head_dim", 128},
      {"linear_value_head_dim", 128},
      {"linear_num_key_heads", 16},
      {"linear_num_value_heads", 16},
      {"layer_types", types}};
  return load_model_random_from_json(text_config, ops, seed);
}

}  // namespace flide::test
