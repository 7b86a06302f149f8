// What a route needs from the server that runs it: the served model's tokenizer and name, the
// model's vocabulary size and the admission limits (flags of `flide serve`).
#pragma once

#include <cstdint>
#include <string>

#include "server/prepared_request.h"
#include "tokenizer/tokenizer.h"

namespace flide::server {

struct RouteContext {
  const Tokenizer& tokenizer;  // the served model's tokenizer.json
  std::string model_id;        // reported as "model"; the one name /v1/decisions accepts
  int64_t vocab_size = 0;      // the model's; every rendered token id must be below it
  RouteLimits limits;
};

}  // namespace flide::server
