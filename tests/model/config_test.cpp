// Qwen35Config parsing: the flat CausalLM and nested multimodal layouts, the shipped configs
// in ../shared/configs, HF's defaults, and one error per validation rule — each message must
// name the offending key so a user can fix config.json without reading our source.
#include "model/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace flide {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr auto kLinear = LayerType::LayerType_linear_attention;
constexpr auto kFull = LayerType::LayerType_full_attention;

// A small flat Qwen3_5ForCausalLM config in the shape of the real ones.
json flat_config() {
  json layer_types = json::array();
  for (int i = 0; i < 6; ++i)
    layer_types.push_back(i % 3 == 2 ? "full_attention" : "linear_attention");
  return {{"architectures", {"Qwen3_5ForCausalLM"}},
          {"model_type", "qwen3_5_text"},
          {"vocab_size", 1000},
          {"hidden_size", 64},
          {"intermediate_size", 160},
          {"num_hidden_layers", 6},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 32},
          {"hidden_act", "silu"},
          {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", true},
          {"rope_parameters",
           {{"rope_type", "default"}, {"rope_theta", 5e6}, {"partial_rotary_factor", 0.5}}},
          {"linear_conv_kernel_dim", 4},
          {"linear_key_head_dim", 16},
          {"linear_value_head_dim", 24},
          {"linear_num_key_heads", 2},
          {"linear_num_value_heads", 6},
          {"layer_types", layer_types},
          {"eos_token_id", 7}};
}

// The same text config nested the way official multimodal checkpoints ship it.
json multimodal_config() {
  json text = flat_config();
  text.erase("architectures");
  text["model_type"] = "qwen3_5_text";
  text["eos_token_id"] = 7;
  text["tie_word_embeddings"] = false;
  return {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
          {"model_type", "qwen3_5"},
          {"text_config", text},
          {"vision_config",
           {{"model_type", "qwen3_5_vision"},
            {"hidden_size", 1152},
            {"depth", 27},
            {"hidden_act", "gelu_pytorch_tanh"}}},
          {"image_token_id", 248056},
          {"tie_word_embeddings", true},
          {"eos_token_id", {9, 7}}};
}

std::string error_of(const json& cfg) {
  try {
    Qwen35Config::parse(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected flide::Error for " << cfg.dump();
  return "";
}

TEST(Qwen35Config, FlatCausalLM) {
  const Qwen35Config c = Qwen35Config::parse(flat_config());
  EXPECT_EQ(c.architecture, "Qwen3_5ForCausalLM");
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.partial_rotary_factor, 0.5);
  EXPECT_EQ(c.rotary_dim(), 16);
  EXPECT_EQ(c.linear_num_key_heads, 2);
  EXPECT_EQ(c.linear_num_value_heads, 6);
  EXPECT_EQ(c.linear_key_head_dim, 16);
  EXPECT_EQ(c.linear_value_head_dim, 24);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.layer_types,
            (std::vector<LayerType>{kLinear, kLinear, kFull, kLinear, kLinear, kFull}));
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{7});
}

TEST(Qwen35Config, MultimodalReadsTextConfig) {
  const Qwen35Config c = Qwen35Config::parse(multimodal_config());
  EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(c.hidden_size, 64);  // not vision_config's 1152
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.rotary_dim(), 16);
  EXPECT_FALSE(c.tie_word_embeddings);  // text_config's value wins over the top level's
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{7, 9}));  // text first, deduplicated
}

TEST(Qwen35Config, Defaults) {
  json cfg = flat_config();
  for (const char* key :
       {"rms_norm_eps", "rope_parameters", "hidden_act", "tie_word_embeddings", "eos_token_id"})
    cfg.erase(key);
  cfg["bos_token_id"] = nullptr;
  Qwen35Config c = Qwen35Config::parse(cfg);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 8);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.eos_token_ids.empty());

  // Pre-5.x configs keep rope keys at the text-config level; rope_parameters wins over them.
  cfg["rope_theta"] = 1e6;
  cfg["partial_rotary_factor"] = 0.5;
  c = Qwen35Config::parse(cfg);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rotary_dim(), 16);
  cfg["rope_parameters"] = {{"rope_theta", 2e6}};
  c = Qwen35Config::parse(cfg);
  EXPECT_EQ(c.rope_theta, 2e6);
  EXPECT_EQ(c.partial_rotary_factor, 0.5);
}

TEST(Qwen35Config, DerivedLayerTypes) {
  json cfg = flat_config();
  cfg.erase("layer_types");
  cfg["num_hidden_layers"] = 8;
  EXPECT_EQ(
      Qwen35Config::parse(cfg).layer_types,
      (std::vector<LayerType>{kLinear, kLinear, kLinear, kFull, kLinear, kLinear, kLinear, kFull}));
  cfg["full_attention_interval"] = 2;
  EXPECT_EQ(
      Qwen35Config::parse(cfg).layer_types,
      (std::vector<LayerType>{kLinear, kFull, kLinear, kFull, kLinear, kFull, kLinear, kFull}));
  cfg["layer_types"] = nullptr;  // null means "derive", as in HF
  EXPECT_EQ(Qwen35Config::parse(cfg).layer_types.size(), 8u);
  cfg["full_attention_interval"] = 0;
  EXPECT_THAT(error_of(cfg), HasSubstr("\"full_attention_interval\""));
}

TEST(Qwen35Config, LegacyLayerTypeSpellings) {
  json cfg = flat_config();
  cfg["layer_types"] = {"mamba", "mamba",         "attention", "linear_attention",
                        "mamba", "full_attention"};
  EXPECT_EQ(Qwen35Config::parse(cfg).layer_types,
            (std::vector<LayerType>{kLinear, kLinear, kFull, kLinear, kLinear, kFull}));
}

TEST(Qwen35Config, ShippedConfigs) {
  const fs::path dir = fs::path(FLIDE_SHARED_DIR) / "configs";
  if (!fs::exists(dir / "qwen3_5_0_8b.json")) GTEST_SKIP() << "no shipped configs in " << dir;
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    const Qwen35Config c = Qwen35Config::parse(json::parse(std::ifstream(entry.path())));
    EXPECT_EQ(c.vocab_size, 248320);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_EQ(c.rope_theta, 1e7);
    EXPECT_EQ(int64_t(c.layer_types.size()), c.num_hidden_layers);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      EXPECT_EQ(c.layer_types[size_t(i)], (i + 1) % 4 == 0 ? kFull : kLinear) << "layer " << i;
    ++seen;
  }
  EXPECT_GE(seen, 1);

  const Qwen35Config c = Qwen35Config::parse(json::parse(std::ifstream(dir / "qwen3_5_0_8b.json")));
  EXPECT_EQ(c.architecture, "Qwen3_5ForCausalLM");
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3584);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.linear_num_key_heads, 16);
  EXPECT_EQ(c.linear_num_value_heads, 16);
  EXPECT_EQ(c.layer_types[2], kLinear);
  EXPECT_EQ(c.layer_types[3], kFull);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(Qwen35Config, MissingKey) {
  json cfg = flat_config();
  cfg.erase("hidden_size");
  EXPECT_EQ(error_of(cfg), "config.json: \"hidden_size\" is missing (must be a positive integer)");
  json mm = multimodal_config();
  mm["text_config"].erase("linear_conv_kernel_dim");
  EXPECT_THAT(error_of(mm), HasSubstr("\"text_config.linear_conv_kernel_dim\" is missing"));
}

TEST(Qwen35Config, WrongType) {
  for (const json& bad : {json("1024"), json(64.5), json(true), json(0), json(-4), json::array()}) {
    json mm = multimodal_config();
    mm["text_config"]["hidden_size"] = bad;
    EXPECT_THAT(error_of(mm),
                HasSubstr("config.json: \"text_config.hidden_size\" must be a positive integer"))
        << bad.dump();
  }
  json cfg = flat_config();
  cfg["rms_norm_eps"] = "tiny";
  EXPECT_THAT(error_of(cfg), HasSubstr("\"rms_norm_eps\" must be a positive number"));
  cfg = flat_config();
  cfg["tie_word_embeddings"] = 1;
  EXPECT_THAT(error_of(cfg), HasSubstr("\"tie_word_embeddings\""));
  cfg = flat_config();
  cfg["eos_token_id"] = {7, "eos"};
  EXPECT_THAT(error_of(cfg), HasSubstr("\"eos_token_id\""));
  cfg = flat_config();
  cfg["layer_types"] = "full_attention";
  EXPECT_THAT(error_of(cfg), HasSubstr("\"layer_types\" must be a list"));
  json mm = multimodal_config();
  mm["text_config"] = "oops";
  EXPECT_THAT(error_of(mm), HasSubstr("\"text_config\" must be a JSON object"));
  EXPECT_THAT(error_of(json::array()), HasSubstr("top level must be a JSON object"));
}

TEST(Qwen35Config, BadLayerTypes) {
  json cfg = flat_config();
  cfg["layer_types"][4] = "sliding_attention";
  EXPECT_THAT(error_of(cfg),
              HasSubstr("\"layer_types[4]\" must be \"linear_attention\" or \"full_attention\""));
  cfg = flat_config();
  cfg["layer_types"].erase(5);
  EXPECT_THAT(error_of(cfg), HasSubstr("\"layer_types\" has 5 entries but num_hidden_layers is 6"));
  json mm = multimodal_config();
  mm["text_config"]["layer_types"][0] = 3;
  EXPECT_THAT(error_of(mm), HasSubstr("\"text_config.layer_types[0]\""));
}

TEST(Qwen35Config, HeadsNotDividing) {
  json cfg = flat_config();
  cfg["num_key_value_heads"] = 3;
  EXPECT_THAT(error_of(cfg),
              HasSubstr("\"num_key_value_heads\" (3) must divide num_attention_heads (4)"));
  cfg = flat_config();
  cfg["linear_num_value_heads"] = 5;
  EXPECT_THAT(error_of(cfg),
              HasSubstr("\"linear_num_key_heads\" (2) must divide linear_num_value_heads (5)"));
}

TEST(Qwen35Config, UnsupportedArchitecture) {
  json cfg = flat_config();
  cfg["architectures"] = {"Qwen3NextForCausalLM"};
  std::string msg = error_of(cfg);
  EXPECT_THAT(msg, HasSubstr("\"architectures\""));
  EXPECT_THAT(msg, HasSubstr("Qwen3NextForCausalLM"));
  cfg.erase("architectures");
  EXPECT_THAT(error_of(cfg), HasSubstr("\"architectures\" must be a non-empty list"));
  cfg["architectures"] = json::array();
  EXPECT_THAT(error_of(cfg), HasSubstr("\"architectures\""));
}

TEST(Qwen35Config, UnsupportedMath) {
  json cfg = flat_config();
  cfg["hidden_act"] = "gelu";
  EXPECT_THAT(error_of(cfg), HasSubstr("\"hidden_act\" must be \"silu\""));
  cfg = flat_config();
  cfg["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_THAT(error_of(cfg), HasSubstr("\"rope_parameters.rope_type\" must be \"default\""));
  cfg = flat_config();
  cfg["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_THAT(error_of(cfg), HasSubstr("\"rope_scaling.type\""));
  cfg = flat_config();
  cfg["rope_parameters"]["partial_rotary_factor"] = 1.5;
  EXPECT_THAT(error_of(cfg),
              HasSubstr("\"rope_parameters.partial_rotary_factor\" must be in (0, 1]"));
  cfg = flat_config();
  cfg["head_dim"] = 6;  // 6 * 0.5 = 3 rotary dims: RoPE rotates pairs
  EXPECT_THAT(error_of(cfg),
              HasSubstr("\"rope_parameters.partial_rotary_factor\" gives rotary_dim 3"));
}

TEST(Qwen35Config, Load) {
  const fs::path dir =
      fs::temp_directory_path() / ("flide_config_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  try {
    Qwen35Config::load(dir);
    ADD_FAILURE() << "expected flide::Error for a missing config.json";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "config.json").string()));
  }
  std::ofstream(dir / "config.json") << "{\"architectures\": [";
  try {
    Qwen35Config::load(dir);
    ADD_FAILURE() << "expected flide::Error for malformed JSON";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "config.json").string()));
    EXPECT_THAT(e.what(), HasSubstr("malformed JSON"));
  }
  std::ofstream(dir / "config.json") << multimodal_config().dump(2);
  EXPECT_EQ(Qwen35Config::load(dir).hidden_size, 64);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flide
