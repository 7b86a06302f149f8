// POST /v1/decisions (shared/specs/decision_api.md §2 and its Addendum): OpenAI's Decisions
// format, whose schema of record is the `openai` npm package 7.55.0 (resources/decisions.d.ts).
// Request {"model", "input", "questions": [{"type": "predicate"|"choice"|"score",
// "instructions", "name"?, "choices"|"levels"}], "prompt_cache_key"?, "prompt_cache_options"?,
// "safety_identifier"?}, translated to the OpenJev prompt of §1.4 (predicate = noul, choice
// values as option keys, score levels "i: label[: description]"). Response {"model",
// "answers" (request order, "name" always present, null when unnamed, typed choice values),
// "usage"}. Refusals: 400 invalid_request_error with "param" for every validation failure
// (errors.h), 404 for a model other than the one served, 413 for sizes (budgets.h).
#pragma once

#include <nlohmann/json.hpp>

#include "server/prepared_request.h"
#include "server/routes/route_context.h"

namespace flide::server {

// `body` must be parsed as ordered_json (JSON input and instructions keep their key order in
// the prompt). The HTTP layer runs check_json_depth first.
PreparedRequest prepare_decisions(const nlohmann::ordered_json& body, const RouteContext& ctx);

}  // namespace flide::server
