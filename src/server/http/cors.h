// Cross-origin requests from browser pages (flide serve --allowed-origins), as vLLM's and
// SGLang's CORS middleware and llama.cpp's server answer them: by default a page of any origin may
// call the server and read its answers (the API key, when set, still guards every route but
// /health and /v1/models); a list narrows that to the origins named, and "none" turns it off.
// A response to a request with an allowed Origin carries Access-Control-Allow-Origin (and
// exposes Retry-After, for a page that backs off after a 429). A preflight (OPTIONS with
// Origin and Access-Control-Request-Method) is answered before authentication, which browsers
// never send on it: 204 with the methods and headers allowed, or 400 for an origin not allowed.
#pragma once

#include <httplib.h>

#include <optional>
#include <string>
#include <vector>

namespace flide::server {

struct CorsPolicy {
  std::vector<std::string> origins = {"*"};  // "*": any origin; empty: none

  // The Access-Control-Allow-Origin value for a request, or none (no Origin, or not allowed).
  std::optional<std::string> allow_origin(const httplib::Request& req) const;
};

// --allowed-origins' comma-separated entries: "*" alone, "none" alone, or origins
// (scheme://host[:port], http or https, no path). Throws flide::Error naming the flag and the
// entry at fault.
CorsPolicy parse_allowed_origins(const std::vector<std::string>& entries);

bool is_preflight(const httplib::Request& req);

// Access-Control-Allow-Origin (with Vary: Origin when it names the origin) and
// Access-Control-Expose-Headers, when the request's origin is allowed.
void add_cors_headers(const CorsPolicy& policy, const httplib::Request& req,
                      httplib::Response& res);

// A preflight's extra headers: the methods (`method` and OPTIONS), the headers the browser asked
// to send, and how long it may remember the answer.
std::vector<std::pair<std::string, std::string>> preflight_headers(const httplib::Request& req,
                                                                   const std::string& method);

}  // namespace flide::server
