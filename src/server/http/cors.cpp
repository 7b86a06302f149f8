// Cross-origin requests (see cors.h).
#include "server/http/cors.h"

#include <algorithm>

#include "core/error.h"

namespace flide::server {

namespace {

constexpr int kPreflightMaxAgeSeconds = 600;  // as vLLM's (Starlette's) default

// scheme://host[:port] with an http(s) scheme and nothing after the authority.
bool is_origin(const std::string& s) {
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (s.rfind(scheme, 0) != 0) continue;
    const std::string host = s.substr(scheme.size());
    return !host.empty() && host.find_first_of("/?# \t,") == std::string::npos;
  }
  return false;
}

}  // namespace

std::optional<std::string> CorsPolicy::allow_origin(const httplib::Request& req) const {
  if (!req.has_header("Origin")) return std::nullopt;
  if (std::find(origins.begin(), origins.end(), "*") != origins.end()) return "*";
  const std::string origin = req.get_header_value("Origin");
  if (std::find(origins.begin(), origins.end(), origin) != origins.end()) return origin;
  return std::nullopt;
}

CorsPolicy parse_allowed_origins(const std::vector<std::string>& entries) {
  CorsPolicy policy;
  if (entries == std::vector<std::string>{"*"}) return policy;
  policy.origins.clear();
  if (entries == std::vector<std::string>{"none"}) return policy;
  for (const std::string& origin : entries) {
    if (!is_origin(origin))
      throw Error(cat("--allowed-origins: \"", origin,
                      "\" is not an origin (http(s)://host[:port], no path; or \"*\" alone, or "
                      "\"none\")"));
    policy.origins.push_back(origin);
  }
  return policy;
}

bool is_preflight(const httplib::Request& req) {
  return req.method == "OPTIONS" && req.has_header("Origin") &&
         req.has_header("Access-Control-Request-Method");
}

void add_cors_headers(const CorsPolicy& policy, const httplib::Request& req,
                      httplib::Response& res) {
  const std::optional<std::string> origin = policy.allow_origin(req);
  if (!origin) return;
  res.set_header("Access-Control-Allow-Origin", *origin);
  if (*origin != "*") res.set_header("Vary", "Origin");  // caches must not serve it to others
  res.set_header("Access-Control-Expose-Headers", "Retry-After");
}

std::vector<std::pair<std::string, std::string>> preflight_headers(const httplib::Request& req,
                                                                   const std::string& method) {
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  return {{"Access-Control-Allow-Methods", method + ", OPTIONS"},
          {"Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked},
          {"Access-Control-Max-Age", std::to_string(kPreflightMaxAgeSeconds)}};
}

}  // namespace flide::server
