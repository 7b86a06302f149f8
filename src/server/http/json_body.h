// A request body as JSON, checked in the order that keeps hostile bodies cheap: UTF-8 first
// (JSON text is UTF-8, RFC 8259 §8.1, and every message below may quote the body), then the
// nesting depth on the raw text (routes/json_depth.h), then the parse. Errors are ApiErrors in
// the route's style (routes/errors.h): 400 invalid_request_error for an empty body, bytes that
// are not UTF-8, text that is not JSON and numbers past a double's range; 422 (System One) or
// 400 (OpenAI) for nesting.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/routes/errors.h"

namespace flide::server {

nlohmann::ordered_json parse_json_body(std::string_view body, Route route);

// nlohmann's what() without its tag ("[json.exception.parse_error.101] "): the reason alone.
std::string untagged(const nlohmann::ordered_json::exception& e);

}  // namespace flide::server
