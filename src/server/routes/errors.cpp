#include "server/routes/errors.h"

#include <utility>

namespace flide::server {

namespace {

ApiError with_param(ApiError error, const std::string& path) {
  error.param = path;
  return error;
}

std::string at(const std::string& path, const std::string& what) {
  return path.empty() ? what : path + ": " + what;
}

}  // namespace

ApiError malformed_json(std::string message) {
  return ApiError(400, "invalid_request_error", std::move(message));
}

ApiError invalid_field(Route route, const std::string& path, const std::string& what) {
  if (route == Route::Route_systemone)
    return ApiError(422, "unprocessable_entity_error", at(path, what));
  return with_param(ApiError(400, "invalid_request_error", at(path, what)), path);
}

ApiError exceed_context(Route route, const std::string& path, const std::string& what) {
  if (route == Route::Route_systemone)
    return ApiError(400, "exceed_context_size_error", at(path, what));
  return with_param(ApiError(400, "invalid_request_error", at(path, what)), path);
}

ApiError not_found(const std::string& path, const std::string& what) {
  return with_param(ApiError(404, "not_found_error", at(path, what)), path);
}

ApiError too_large(std::string message) {
  return ApiError(413, "request_too_large_error", std::move(message));
}

ApiError rate_limited(std::string message, int retry_after_s) {
  return ApiError(429, "rate_limit_error", std::move(message),
                  retry_after_s < 1 ? 1 : retry_after_s);
}

ApiError not_supported(std::string message) {
  return ApiError(501, "not_supported_error", std::move(message));
}

ApiError unavailable(std::string message) {
  return ApiError(503, "unavailable_error", std::move(message));
}

std::string shown(const nlohmann::ordered_json& value) {
  if (value.is_string() && value.get_ref<const std::string&>().empty()) return "\"\"";
  if (value.is_object() && value.empty()) return "{}";
  if (value.is_array() && value.empty()) return "[]";
  return value.type_name();
}

nlohmann::ordered_json error_body(const ApiError& error, Route route) {
  nlohmann::ordered_json inner;
  inner["message"] = error.what();
  inner["type"] = error.type;
  if (route == Route::Route_systemone) {
    inner["code"] = error.status;
  } else {
    inner["param"] =
        error.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param);
    inner["code"] = nullptr;
  }
  nlohmann::ordered_json body;
  body["error"] = std::move(inner);
  return body;
}

}  // namespace flide::server
