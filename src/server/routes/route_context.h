// What a route needs from the server that runs it: the served model's tokenizer and name, the
// model's vocabulary size, the admission limits (flags of `flide serve`) and the checkpoint's
// decision calibration.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/decision_calibration.h"
#include "server/prepared_request.h"
#include "tokenizer/tokenizer.h"

namespace flide::server {

struct RouteContext {
  const Tokenizer& tokenizer;  // the served model's tokenizer.json
  std::string model_id;        // reported as "model"; a name /v1/decisions accepts
  int64_t vocab_size = 0;      // the model's; every rendered token id must be below it
  RouteLimits limits;
  DecisionCalibration calibration;  // config.json's, or --calibration's; T = 1 without one
  // More names /v1/decisions accepts for the model (flide serve --served-model-name's after the
  // first, as vLLM's); responses still report model_id.
  std::vector<std::string> model_aliases = {};

  std::vector<std::string> model_names() const {  // model_id first
    std::vector<std::string> names{model_id};
    names.insert(names.end(), model_aliases.begin(), model_aliases.end());
    return names;
  }
  bool serves(const std::string& name) const {
    return name == model_id ||
           std::find(model_aliases.begin(), model_aliases.end(), name) != model_aliases.end();
  }
};

}  // namespace flide::server
