// The refusals of both decision routes in one place: the status <-> type table
// (shared/specs/decision_api.md §1.5 for /v1/systemone, §2.5 for /v1/decisions) as one factory
// per row, and the two error bodies. The routes differ in two ways only: a body that fails
// validation is 422 on System One (llama.cpp's table) and 400 on OpenAI's route, and OpenAI's
// body carries "param" and a string-or-null "code" where System One's "code" is the status.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "server/prepared_request.h"

namespace flide::server {

enum class Route : uint8_t { Route_systemone, Route_decisions };

// The body is not JSON (or is empty): 400 invalid_request_error on both routes.
ApiError malformed_json(std::string message);
// Well-formed JSON that fails validation: 422 unprocessable_entity_error (System One) or
// 400 invalid_request_error (OpenAI). The message is "<path>: <what>" (path "" = the body), and
// the path is OpenAI's "param".
ApiError invalid_field(Route route, const std::string& path, const std::string& what);
// One question's prompt is longer than the context: 400 exceed_context_size_error (System One),
// 400 invalid_request_error (OpenAI); `what` contains "request (N tokens)".
ApiError exceed_context(Route route, const std::string& path, const std::string& what);
// 404 not_found_error (OpenAI's unknown `model`).
ApiError not_found(const std::string& path, const std::string& what);
// 413 request_too_large_error: size budgets, refused before any evaluation, no Retry-After.
ApiError too_large(std::string message);
// 429 rate_limit_error: the decision queue is full; Retry-After retry_after_s (>= 1).
ApiError rate_limited(std::string message, int retry_after_s);
// 501 not_supported_error: the loaded model cannot answer (not a decision model, images).
ApiError not_supported(std::string message);
// 503 unavailable_error: the model is still loading.
ApiError unavailable(std::string message);

// A value's type as messages show it ("string", "number", ...), with empty strings and
// containers spelled out (`""`, {}, []): "must be non-empty, got string" would not say why.
std::string shown(const nlohmann::ordered_json& value);

// {"error": {"message", "type", "code"}} with code = status (System One), or
// {"error": {"message", "type", "param", "code"}} with param = path or null and code null
// (OpenAI's ErrorObject).
nlohmann::ordered_json error_body(const ApiError& error, Route route);

}  // namespace flide::server
