// POST /v1/systemone (shared/specs/decision_api.md §1): TypeSafe's System One format with
// llama.cpp's contract. Request {"state", "questions": {id: {"type", "instructions",
// "criteria"}}, "model"?, "images"?/"files"?, "videos"?}; unknown top-level fields are ignored,
// every field read is validated. Response {"model", "answers" (keyed by the question ids, in
// request order), "usage": {"input_tokens" (shared prefix once), "output_tokens": 0}}.
// Refusals (errors.h): 422 with the field's path (`questions.route.criteria: ...`), 413 for
// sizes (budgets.h), 400 for one prompt longer than the context, 501 for images.
#pragma once

#include <nlohmann/json.hpp>

#include "server/prepared_request.h"
#include "server/routes/route_context.h"

namespace flide::server {

// `body` must be parsed as ordered_json: answers follow the request's question order and JSON
// states keep their key order in the prompt. The HTTP layer runs check_json_depth first.
PreparedRequest prepare_systemone(const nlohmann::ordered_json& body, const RouteContext& ctx);

}  // namespace flide::server
