// flide's HTTP front end (cpp-httplib): a thin adapter that turns HTTP requests into calls on
// the routes (server/routes) and the engine loop, and their answers or refusals into HTTP
// responses. It listens before the model loads (every route but /metrics answers 503 until
// set_serving), so a client polling /health sees the load finish.
//
// Routes: POST /v1/systemone, POST /v1/decisions, GET /v1/models, GET /health, GET /metrics,
// POST /tokenize, POST /detokenize. What every request goes through, in order:
//   a CORS preflight is answered first (cors.h), without the API key;
//   body read, capped at max_body_bytes (413 naming the limit; a multipart body is 415);
//   API key (401 without `Authorization: Bearer KEY`; /health and /v1/models stay open, as in
//   llama.cpp, so that load balancers and model pickers work without the key);
//   unknown path 404, wrong method 405 with Allow; 503 while the model loads;
//   then the route: UTF-8, nesting and JSON checks (json_body.h), the route's own validation,
//   and for decisions admission to the engine queue (429 with Retry-After when full).
// Errors are always {"error": {...}} (routes/errors.h): /v1/decisions in OpenAI's style, every
// other path in System One's ({"message", "type", "code"}).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/http/cors.h"
#include "server/http/engine_loop.h"
#include "server/http/metrics.h"
#include "server/routes/route_context.h"

namespace flide::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: an ephemeral port (bind() says which)
  std::string api_key;  // "": no authentication
  int64_t max_body_bytes = int64_t(4) << 20;
  // Connections served at once, each on a thread started when it arrives (ended after 30 s
  // idle); more wait for a free thread.
  int threads = 1024;
  CorsPolicy cors;         // browser pages of other origins (cors.h); default: any
  bool access_log = true;  // a line on stderr per answered request (access_log.h)
};

// What the routes need once the model has loaded; it must outlive the server's serving.
struct ServingModel {
  RouteContext routes;
  EngineLoop& engine;
  int64_t max_model_len = 0;  // the model's position limit, for vLLM's /tokenize answer
  int64_t created = 0;        // unix seconds when it loaded (/v1/models)
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, Metrics& metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int bind();    // binds host:port and returns the port; flide::Error when it cannot
  void start();  // serves on a background thread
  void set_serving(const ServingModel* model);
  void stop();  // stops accepting and joins the serving threads

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flide::server
