// Architecture registry: Hugging Face "architectures" string -> factory. Adding an
// architecture means one file with its factory and one line here.
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model.h"
#include "model/qwen3_5.h"

namespace flide {

namespace {

using Factory = std::function<std::unique_ptr<Model>(const std::filesystem::path&, Ops&)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> factories = {
      {"Qwen3_5ForCausalLM", load_qwen3_5},
      {"Qwen3_5ForConditionalGeneration", load_qwen3_5},
  };
  return factories;
}

std::string read_architecture(const std::filesystem::path& dir) {
  std::filesystem::path path = dir / "config.json";
  std::ifstream file(path);
  if (!file) throw Error(cat(path, " not found"));
  nlohmann::json config = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) throw Error(cat(path, " is not valid JSON"));
  const auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string())
    throw Error(cat(path, ": \"architectures\" must be a non-empty array of strings"));
  return (*it)[0].get<std::string>();
}

}  // namespace

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Ops& ops) {
  if (!std::filesystem::is_directory(dir)) throw Error(cat("model directory ", dir, " not found"));
  std::string architecture = read_architecture(dir);
  auto it = registry().find(architecture);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, factory] : registry()) known += (known.empty() ? "" : ", ") + name;
    throw Error(cat(dir / "config.json", ": architecture \"", architecture,
                    "\" is not supported (supported: ", known, ")"));
  }
  return it->second(dir, ops);
}

}  // namespace flide
