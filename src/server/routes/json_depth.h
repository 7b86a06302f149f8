// The nesting check that runs on the raw body before JSON parsing (decision_api.md §1.1:
// a 5000-deep array must be a 4xx, not a crash). nlohmann's parser is iterative, but its dump,
// and the routes' own walks (json_text, input_json limits), recurse once per level; bounding
// the depth before parsing bounds all of them.
#pragma once

#include <string_view>

#include "server/routes/errors.h"

namespace flide::server {

// Levels of [ and { a body may open, the body's own object included. 40 is the largest cap
// that refuses llama.cpp's 40-deep `state` test (body depth 41) and it admits OpenAI's deepest
// legal body: a 32-level input_json `data` inside input[i].content[j] (depth 37).
constexpr int kMaxJsonDepth = 40;

// Throws invalid_field (422 System One, 400 OpenAI) naming the top-level member that nests too
// deeply, e.g. `state: nested too deeply (more than 40 levels)`. Brackets inside strings do not
// count; a body that is not JSON passes through to the parser, which reports it.
void check_json_depth(std::string_view body, int max_depth, Route route);

}  // namespace flide::server
