// A decision checkpoint's calibration (decision_api.md §1.3, "Temperature / calibration"): a
// question's probabilities are softmax(s / T + b) over its label logits s, with T by question
// type and option-count bucket, and b a bias on noul's log-odds (0 for the other types).
// llama.cpp reads the temperatures from GGUF metadata `<arch>.decision.temperature.<key>` and
// looks up `<type>.<bucket>`, then `<type>`, then 1; the OpenJev helper adds the noul bias.
// A Hugging Face checkpoint carries the same table in config.json:
//   "decision_calibration": {"temperature": {"choice": 0.85, "score.6_10": 0.9, ...},
//                            "noul_bias": 0.0}
// and vLLM's "decision_temperature" (one T for every type, set through --hf-overrides) is read
// as the last fallback before 1. Absent both, a checkpoint is uncalibrated: T = 1, b = 0.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "engine/decision_prompt.h"

namespace flide {

// llama.cpp's bucket of a question with `n_options` options: "2" (n <= 2), "3_5", "6_10", "11"
// (n >= 11).
std::string option_bucket(size_t n_options);

class DecisionCalibration {
 public:
  DecisionCalibration() = default;  // uncalibrated

  // The table in a config.json object (either key may be absent). Throws flide::Error naming
  // `source` and the key at fault: an unknown key, type or bucket, a temperature that is not a
  // number > 0, a bias that is not a number.
  static DecisionCalibration from_config(const nlohmann::json& config, const std::string& source);

  double temperature(QuestionType type, size_t n_options) const;
  double noul_bias() const { return noul_bias_; }

  // The table as the serve log prints it, e.g. "choice T=0.85, noul T=1.5547, noul bias 0.1",
  // or "none (T = 1)".
  std::string describe() const;

 private:
  std::map<std::string, double> temperatures_;  // "<type>" or "<type>.<bucket>"
  std::optional<double> any_type_;              // "decision_temperature"
  double noul_bias_ = 0.0;
};

}  // namespace flide
