// Size limits shared by both routes (decision_api.md §1.1 "Limits on count and size"): all
// refusals before any evaluation, 413 request_too_large_error without Retry-After, except one
// question longer than the context (400, "request (N tokens)"). Messages say which flag of
// `flide serve` raises the limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "server/prepared_request.h"
#include "server/routes/errors.h"

namespace flide::server {

// The byte pre-flight, for the HTTP layer to run before parsing: with a prompt budget
// (limits.max_prompt_tokens > 0), a body over max(4096, 32 × budget) bytes is refused without
// tokenizing it.
void check_body_size(size_t bytes, const RouteLimits& limits, Route route);

// limits.max_questions (> 0) questions at most.
void check_question_count(size_t n_questions, const RouteLimits& limits);

// prompt_tokens[i]: question i's full prompt length; paths[i]: its field path. Each must fit
// limits.max_context_tokens and their sum (before prefix sharing) limits.max_prompt_tokens;
// 0 is unlimited. A total equal to the budget is admitted.
void check_prompt_tokens(const std::vector<int64_t>& prompt_tokens,
                         const std::vector<std::string>& paths, const RouteLimits& limits,
                         Route route);

}  // namespace flide::server
