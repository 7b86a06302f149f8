// The tail both routes share once a body is validated: the OpenJev prompts of §1.4 tokenized
// into one question tree (engine/decision_prompt.h), the size budgets, and the token counts
// that usage reports. The caller adds `respond`.
#pragma once

#include <string>
#include <vector>

#include "engine/decision_prompt.h"
#include "server/prepared_request.h"
#include "server/routes/errors.h"
#include "server/routes/route_context.h"

namespace flide::server {

// paths[i] names question i in messages (e.g. "questions.route", "questions[3]").
PreparedRequest prepare_tree(const RouteContext& ctx, Route route, const std::string& state_text,
                             const std::vector<DecisionQuestion>& questions,
                             const std::vector<std::string>& paths);

}  // namespace flide::server
