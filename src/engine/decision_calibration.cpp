#include "engine/decision_calibration.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace flide {

namespace {

constexpr const char* kBuckets[] = {"2", "3_5", "6_10", "11"};  // by option count, see below

bool known_key(const std::string& key) {
  for (QuestionType type : kQuestionTypes) {
    const std::string name = question_type_name(type);
    if (key == name) return true;
    for (const char* bucket : kBuckets)
      if (key == name + "." + bucket) return true;
  }
  return false;
}

// A temperature divides logits: it must be a finite number above 0 (llama.cpp refuses <= 0 too).
double temperature_value(const nlohmann::json& value, const std::string& where) {
  if (!value.is_number() || !(value.get<double>() > 0.0) || !std::isfinite(value.get<double>()))
    throw Error(cat(where, " must be a number > 0, got ", value.dump()));
  return value.get<double>();
}

}  // namespace

std::string option_bucket(size_t n_options) {
  return kBuckets[n_options <= 2 ? 0 : n_options <= 5 ? 1 : n_options <= 10 ? 2 : 3];
}

DecisionCalibration DecisionCalibration::from_config(const nlohmann::json& config,
                                                     const std::string& source) {
  DecisionCalibration out;
  if (!config.is_object()) throw Error(cat(source, " is not a JSON object"));
  if (const auto it = config.find("decision_temperature"); it != config.end())
    out.any_type_ = temperature_value(*it, cat(source, ": decision_temperature"));
  const auto table = config.find("decision_calibration");
  if (table == config.end()) return out;
  const std::string where = cat(source, ": decision_calibration");
  if (!table->is_object()) throw Error(cat(where, " must be an object"));
  for (const auto& [key, value] : table->items()) {
    if (key == "noul_bias") {
      if (!value.is_number() || !std::isfinite(value.get<double>()))
        throw Error(cat(where, ".noul_bias must be a number, got ", value.dump()));
      out.noul_bias_ = value.get<double>();
    } else if (key == "temperature") {
      if (!value.is_object()) throw Error(cat(where, ".temperature must be an object"));
      for (const auto& [name, t] : value.items()) {
        if (!known_key(name))
          throw Error(cat(where, ".temperature has an unknown key \"", name,
                          "\" (keys are <type> or <type>.<bucket>: types choice, score, noul; "
                          "buckets 2, 3_5, 6_10, 11)"));
        out.temperatures_[name] = temperature_value(t, cat(where, ".temperature.", name));
      }
    } else {
      throw Error(cat(where, " has an unknown key \"", key, "\" (temperature, noul_bias)"));
    }
  }
  return out;
}

double DecisionCalibration::temperature(QuestionType type, size_t n_options) const {
  const std::string name = question_type_name(type);
  for (const std::string& key : {name + "." + option_bucket(n_options), name})
    if (const auto it = temperatures_.find(key); it != temperatures_.end()) return it->second;
  return any_type_.value_or(1.0);
}

std::string DecisionCalibration::describe() const {
  std::string out;
  for (const auto& [key, t] : temperatures_) out += cat(out.empty() ? "" : ", ", key, " T=", t);
  if (any_type_) out += cat(out.empty() ? "" : ", ", "any type T=", *any_type_);
  if (noul_bias_ != 0.0) out += cat(out.empty() ? "" : ", ", "noul bias ", noul_bias_);
  return out.empty() ? "none (T = 1)" : out;
}

}  // namespace flide
