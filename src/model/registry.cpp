// Architecture registry: Hugging Face "architectures" string -> factory binding a model from its
// config.json and a WeightSource. Adding an architecture means one file with its factory and one
// line here. Weights come from the checkpoint's safetensors (load_model) or are random of the
// config's shapes (load_model_random).
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "model/model.h"
#include "model/qwen3_5.h"
#include "model/random_weights.h"
#include "model/weight_source.h"

namespace flide {

namespace {

using Factory = std::function<std::unique_ptr<Model>(const nlohmann::json& config,
                                                     const WeightSource& weights, Ops& ops)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> factories = {
      {"Qwen3_5ForCausalLM", load_qwen3_5},
      {"Qwen3_5ForConditionalGeneration", load_qwen3_5},
  };
  return factories;
}

nlohmann::json read_config(const std::filesystem::path& path) {
  std::ifstream file(path);
  if (!file) throw Error(cat(path, " not found"));
  nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) throw Error(cat(path, " is not valid JSON"));
  return config;
}

// `where` names the config in errors: its quoted path, or "the config".
const Factory& factory_for(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object()) throw Error(cat(where, ": the top level must be a JSON object"));
  const auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string())
    throw Error(cat(where, ": \"architectures\" must be a non-empty array of strings"));
  const std::string architecture = (*it)[0].get<std::string>();
  auto found = registry().find(architecture);
  if (found == registry().end()) {
    std::string known;
    for (const auto& [name, factory] : registry()) known += (known.empty() ? "" : ", ") + name;
    throw Error(cat(where, ": architecture \"", architecture,
                    "\" is not supported (supported: ", known, ")"));
  }
  return found->second;
}

// HF's tie_word_embeddings, looked up like the config parsers do: text_config first, then the
// top level; absent means untied. A malformed value is left for the architecture's parser.
bool tied_embeddings(const nlohmann::json& config) {
  for (const nlohmann::json* section :
       {config.contains("text_config") ? &config["text_config"] : &config, &config}) {
    if (!section->is_object()) continue;
    auto it = section->find("tie_word_embeddings");
    if (it != section->end() && it->is_boolean()) return it->get<bool>();
  }
  return false;
}

std::unique_ptr<Model> random_model(const nlohmann::json& config, const std::string& where,
                                    Ops& ops, uint64_t seed) {
  const Factory& factory = factory_for(config, where);
  return factory(config, RandomWeights(seed, tied_embeddings(config)), ops);
}

}  // namespace

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Ops& ops) {
  if (!std::filesystem::is_directory(dir)) throw Error(cat("model directory ", dir, " not found"));
  const std::filesystem::path config_file = dir / "config.json";
  const nlohmann::json config = read_config(config_file);
  const Factory& factory = factory_for(config, cat(config_file));
  const SafetensorsStore store = SafetensorsStore::open(dir);
  return factory(config, SafetensorsWeights(store), ops);
}

std::unique_ptr<Model> load_model_random(const std::filesystem::path& config_file, Ops& ops,
                                         uint64_t seed) {
  if (std::filesystem::is_directory(config_file))
    throw Error(cat(config_file, " is a directory; give the config.json file"));
  return random_model(read_config(config_file), cat(config_file), ops, seed);
}

std::unique_ptr<Model> load_model_random_from_json(const nlohmann::json& config, Ops& ops,
                                                   uint64_t seed) {
  return random_model(config, "the config", ops, seed);
}

}  // namespace flide
