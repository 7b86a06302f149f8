// The seam between the HTTP front end (server/http) and the decision routes (server/routes):
// a route turns a parsed JSON body into a PreparedRequest — one question tree for the engine
// plus what it needs to answer — or throws ApiError with the status, type and message the wire
// format prescribes (shared/specs/decision_api.md). Validation happens here, before admission,
// so a refused request never reaches the engine queue.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "engine/tree.h"

namespace flide::server {

// A request the server refuses, rendered as {"error": {"message", "type", "code"}}.
// retry_after_s > 0 only for 429 (sent as Retry-After).
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string message, int retry_after_s = 0)
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        retry_after_s(retry_after_s) {}
  int status;
  std::string type;  // e.g. "invalid_request_error", "request_too_large_error"
  int retry_after_s;
  std::string param;  // the JSON path at fault, "" if none (OpenAI's "param"; routes/errors.h)
};

// Limits a route enforces (flags of `flide serve`); 0 means unlimited where noted.
struct RouteLimits {
  int64_t max_questions = 400;     // per request: the openai package's 1-400 by default
  int64_t max_prompt_tokens = 0;   // rendered prompt tokens over all questions; 0: unlimited
  int64_t max_context_tokens = 0;  // one question's full prompt; 0: unlimited
};

// One admitted decision request.
struct PreparedRequest {
  Tree tree;                    // node 0 the trunk, one child per question (choice readouts)
  int64_t input_tokens = 0;     // tokens evaluated, shared prefix counted once (usage)
  int64_t trunk_tokens = 0;     // tokens of node 0 (shared by every question)
  int64_t rendered_tokens = 0;  // sum of every question's full prompt length
  int64_t n_questions = 0;
  // Renders the route's 200 response from the engine's result for `tree`.
  std::function<nlohmann::ordered_json(const TreeResult&)> respond;
};

}  // namespace flide::server
