// What a route needs from the server that runs it: the served model's tokenizer and name, the
// model's vocabulary size, the admission limits (flags of `flide serve`) and the checkpoint's
// decision calibration.
#pragma once

#include <cstdint>
#include <string>

#include "engine/decision_calibration.h"
#include "server/prepared_request.h"
#include "tokenizer/tokenizer.h"

namespace flide::server {

struct RouteContext {
  const Tokenizer& tokenizer;  // the served model's tokenizer.json
  std::string model_id;        // reported as "model"; the one name /v1/decisions accepts
  int64_t vocab_size = 0;      // the model's; every rendered token id must be below it
  RouteLimits limits;
  DecisionCalibration calibration;  // config.json's, or --calibration's; T = 1 without one
};

}  // namespace flide::server
