// The HTTP adapter (see http_server.h). Every method is routed to one catch-all handler, so
// that 401/404/405/503 follow one policy in one place (httplib itself has no 405) and every
// body is read, within the limit, before answering: an unread body would be parsed as the
// connection's next request.
#include "server/http/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "server/http/access_log.h"
#include "server/http/connection_stream.h"
#include "server/http/connection_threads.h"
#include "server/http/disconnect_probe.h"
#include "server/http/json_body.h"
#include "server/http/tokenize_routes.h"
#include "server/routes/budgets.h"
#include "server/routes/decisions.h"
#include "server/routes/errors.h"
#include "server/routes/systemone.h"

namespace flide::server {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJsonType = "application/json; charset=utf-8";

struct RouteSpec {
  std::string_view path;
  std::string_view method;
  bool open;  // answered without the API key
};

constexpr RouteSpec kRoutes[] = {
    {"/health", "GET", true},         {"/v1/models", "GET", true},
    {"/metrics", "GET", false},       {"/v1/systemone", "POST", false},
    {"/v1/decisions", "POST", false}, {"/tokenize", "POST", false},
    {"/detokenize", "POST", false},
};

const RouteSpec* find_route(std::string_view path) {
  for (const RouteSpec& route : kRoutes)
    if (route.path == path) return &route;
  return nullptr;
}

std::string route_list() {
  std::string out;
  for (const RouteSpec& route : kRoutes)
    out += cat(out.empty() ? "" : ", ", route.method, " ", route.path);
  return out;
}

// The metrics label of a path: hostile paths must not grow the label set.
std::string route_label(std::string_view path) {
  return find_route(path) ? std::string(path) : "other";
}

// OpenAI's error body on its route, System One's everywhere else.
Route error_style(std::string_view path) {
  return path == "/v1/decisions" ? Route::Route_decisions : Route::Route_systemone;
}

struct Reply {
  Reply(int status, std::string body, std::string content_type = kJsonType)
      : status(status), body(std::move(body)), content_type(std::move(content_type)) {}
  int status;
  std::string body;
  std::string content_type;
  int retry_after_s = 0;                                     // 429
  std::string allow;                                         // 405: the method the path takes
  std::vector<std::pair<std::string, std::string>> headers;  // more (a CORS preflight's)
};

std::string dump(const json& body) {
  // Decoded text (detokenize) may end inside a character: send U+FFFD, as HF does, not a throw.
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

Reply json_reply(const json& body) {
  return Reply(200, dump(body));
}

Reply error_reply(const ApiError& error, std::string_view path) {
  Reply reply(error.status, dump(error_body(error, error_style(path))));
  if (error.status == 429) reply.retry_after_s = std::max(1, error.retry_after_s);
  return reply;
}

bool bearer_matches(const std::string& header, const std::string& key) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() != kScheme.size() + key.size() || header.compare(0, kScheme.size(), kScheme))
    return false;
  // Constant time in the key's bytes: the comparison must not tell how much of a guess was right.
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i)
    diff |= static_cast<unsigned char>(header[kScheme.size() + i] ^ key[i]);
  return diff == 0;
}

std::string protocol_error_message(int status) {
  switch (status) {
    case 414:
      return "the request URI is too long";
    case 416:
      return "the Range header is not satisfiable";
    default:
      return cat("malformed HTTP request (status ", status, ")");
  }
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions options;
  Metrics& metrics;
  KeepAliveServer http;  // pipelined requests are answered in order (connection_stream.h)
  std::atomic<const ServingModel*> serving{nullptr};
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  int listen_fd = -1;

  Impl(HttpOptions options_in, Metrics& metrics_in)
      : options(std::move(options_in)), metrics(metrics_in) {}

  void send(const httplib::Request& req, httplib::Response& res, const Reply& reply,
            Clock::time_point start) {
    res.status = reply.status;
    if (reply.status != 204) res.set_content(reply.body, reply.content_type);
    if (reply.retry_after_s > 0) res.set_header("Retry-After", std::to_string(reply.retry_after_s));
    if (!reply.allow.empty()) res.set_header("Allow", reply.allow);
    if (reply.status == 401) res.set_header("WWW-Authenticate", "Bearer");
    for (const auto& [name, value] : reply.headers) res.set_header(name, value);
    add_cors_headers(options.cors, req, res);
    answered(req, reply.status, seconds_since(start));
  }

  // Every response, a handler's or httplib's refusal: counted, and logged (access_log.h).
  void answered(const httplib::Request& req, int status, double seconds) {
    metrics.request_answered(route_label(req.path), status, seconds);
    if (options.access_log) log_access(req, status, seconds);
  }

  ApiError body_too_large(const httplib::Request& req) const {
    const std::string declared = req.get_header_value("Content-Length");
    return ApiError(413, "request_too_large_error",
                    cat("the request body ", declared.empty() ? "" : cat("(", declared, " bytes) "),
                        "is over the limit of ", options.max_body_bytes,
                        " bytes (raise it with --max-body-bytes)"));
  }

  // Methods that carry a body: read it within the limit, then answer.
  void on_body(const httplib::Request& req, httplib::Response& res,
               const httplib::ContentReader& reader) {
    const Clock::time_point start = Clock::now();
    const size_t limit = size_t(options.max_body_bytes);
    // Past the limit (chunked and compressed bodies have no declared length), the rest is read
    // and dropped up to a cap, so that the connection stays in step and the client reads its
    // 413; a body past the cap is cut off.
    const size_t drain_cap = std::max(limit, size_t(16) << 20);
    std::string body;
    size_t seen = 0;
    const auto keep = [&](const char* data, size_t n) {
      seen += n;
      if (seen <= limit) body.append(data, n);
      return seen <= drain_cap;
    };
    if (req.is_multipart_form_data()) {
      const bool read = reader([](const httplib::MultipartFormData&) { return true; },
                               [&](const char*, size_t n) { return (seen += n) <= drain_cap; });
      if (seen > limit || (!read && res.status == 413))
        return send(req, res, error_reply(body_too_large(req), req.path), start);
      return send(req, res,
                  error_reply(ApiError(415, "invalid_request_error",
                                       "Content-Type multipart/form-data is not supported: send "
                                       "the request body as JSON (application/json)"),
                              req.path),
                  start);
    }
    // A request with neither header has an empty body (RFC 9112 §6.3), as `curl -X POST` sends
    // it; httplib's reader would wait for a length and fail.
    const bool read = req.has_header("Content-Length") || req.has_header("Transfer-Encoding")
                          ? reader(keep)
                          : true;
    // httplib refuses a declared Content-Length over the limit itself (status 413).
    if (seen > limit || (!read && res.status == 413))
      return send(req, res, error_reply(body_too_large(req), req.path), start);
    if (!read)
      return send(req, res,
                  error_reply(ApiError(400, "invalid_request_error",
                                       "the request body could not be read (truncated, or a "
                                       "malformed chunked or compressed encoding)"),
                              req.path),
                  start);
    send(req, res, answer(req, body), start);
  }

  void on_no_body(const httplib::Request& req, httplib::Response& res) {
    const Clock::time_point start = Clock::now();
    send(req, res, is_preflight(req) ? preflight(req) : answer(req, req.body), start);
  }

  // Before authentication: browsers send no credentials on a preflight.
  Reply preflight(const httplib::Request& req) const {
    if (!options.cors.allow_origin(req))
      return error_reply(ApiError(400, "invalid_request_error",
                                  cat("the origin ", req.get_header_value("Origin"),
                                      " may not call this server (flide serve --allowed-origins)")),
                         req.path);
    const RouteSpec* route = find_route(req.path);
    Reply reply(204, "");
    reply.headers = preflight_headers(req, route ? std::string(route->method) : "GET, POST");
    return reply;
  }

  Reply answer(const httplib::Request& req, const std::string& body) {
    const RouteSpec* route = find_route(req.path);
    try {
      if (!options.api_key.empty() && !(route && route->open) &&
          !bearer_matches(req.get_header_value("Authorization"), options.api_key))
        throw ApiError(401, "authentication_error",
                       "Invalid API Key: send the header \"Authorization: Bearer <key>\" with the "
                       "key given to flide serve --api-key");
      if (!route)
        throw ApiError(404, "not_found_error",
                       cat("no route ", req.path, " (routes: ", route_list(), ")"));
      const std::string_view method = req.method == "HEAD" ? "GET" : std::string_view(req.method);
      if (method != route->method) {
        Reply reply = error_reply(
            ApiError(405, "method_not_allowed_error",
                     cat(req.method, " is not allowed on ", route->path, ": use ", route->method)),
            req.path);
        reply.allow = route->method;
        return reply;
      }
      if (route->path == "/metrics")
        return Reply(200, metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
      const ServingModel* model = serving.load();
      if (!model) throw unavailable("Loading model");
      return route_answer(*route, body, *model);
    } catch (const ApiError& e) {
      return error_reply(e, req.path);
    } catch (const std::exception& e) {
      return error_reply(ApiError(500, "server_error", e.what()), req.path);
    }
  }

  Reply route_answer(const RouteSpec& route, const std::string& body, const ServingModel& model) {
    if (route.path == "/health") {
      // A load balancer stops sending here while the server drains.
      if (model.engine.stopping()) throw unavailable("the server is shutting down");
      return json_reply({{"status", "ok"}});
    }
    if (route.path == "/v1/models") {  // every name the model answers to, as vLLM lists them
      json data = json::array();
      for (const std::string& name : model.routes.model_names())
        data.push_back(
            {{"id", name}, {"object", "model"}, {"created", model.created}, {"owned_by", "flide"}});
      return json_reply({{"object", "list"}, {"data", std::move(data)}});
    }
    if (route.path == "/tokenize")
      return json_reply(tokenize_answer(parse_json_body(body, Route::Route_systemone),
                                        model.routes.tokenizer, model.max_model_len));
    if (route.path == "/detokenize")
      return json_reply(
          detokenize_answer(parse_json_body(body, Route::Route_systemone), model.routes.tokenizer));
    const Route decision = error_style(route.path);
    check_body_size(body.size(), model.routes.limits, decision);
    const json parsed = parse_json_body(body, decision);
    PreparedRequest prepared = decision == Route::Route_systemone
                                   ? prepare_systemone(parsed, model.routes)
                                   : prepare_decisions(parsed, model.routes);
    std::future<json> answer =
        model.engine.submit(std::move(prepared), make_disconnect_probe(serving_socket()));
    return json_reply(answer.get());
  }

  // Refusals httplib makes before any handler runs (a malformed request line or headers, a
  // declared body over the limit on a GET, a URI too long) come without a body: give them one.
  httplib::Server::HandlerResponse on_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError error =
        res.status == 413 ? body_too_large(req)
        : res.status >= 500
            ? ApiError(res.status, "server_error", "internal server error")
            : ApiError(res.status, "invalid_request_error", protocol_error_message(res.status));
    const Reply reply = error_reply(error, req.path);
    res.set_content(reply.body, reply.content_type);
    answered(req, res.status, 0);
    return httplib::Server::HandlerResponse::Handled;
  }
};

HttpServer::HttpServer(HttpOptions options, Metrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {
  Impl& m = *impl_;
  const int threads = std::max(1, m.options.threads);
  m.http.new_task_queue = [threads] {
    return new ConnectionThreads(size_t(threads), std::chrono::seconds(30));
  };
  m.http.set_payload_max_length(size_t(m.options.max_body_bytes));
  // Closed-loop clients reuse their connection for every request: do not cycle it every 5.
  m.http.set_keep_alive_max_count(1000000);
  // httplib 0.11.4's default sets SO_REUSEPORT, which lets a second server bind the same port
  // and take half its connections; SO_REUSEADDR only allows a restart over TIME_WAIT sockets.
  // The socket is remembered for bind() (below).
  m.http.set_socket_options([&m](int fd) {
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    m.listen_fd = fd;
  });
  const auto with_body = [&m](const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) {
    m.on_body(req, res, reader);
  };
  const auto without_body = [&m](const httplib::Request& req, httplib::Response& res) {
    m.on_no_body(req, res);
  };
  // Without it, a response written in pieces waits on the client's delayed ACK (Nagle): ~90 ms
  // on every request, measured on the H200 host.
  m.http.set_tcp_nodelay(true);
  m.http.Post(".*", with_body);
  m.http.Put(".*", with_body);
  m.http.Patch(".*", with_body);
  m.http.Delete(".*", with_body);
  m.http.Get(".*", without_body);
  m.http.Options(".*", without_body);
  m.http.set_error_handler(httplib::Server::HandlerWithResponse(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.on_error(req, res); }));
  // Handlers catch everything themselves; this covers httplib's own code around them.
  m.http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        const Reply reply =
            error_reply(ApiError(500, "server_error", "internal server error"), req.path);
        res.set_content(reply.body, reply.content_type);
      });
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  const int port = o.port == 0 ? impl_->http.bind_to_any_port(o.host)
                               : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0)
    throw Error(cat("cannot listen on ", o.host, ":", o.port,
                    " (is the port taken, or the host not an address of this machine?)"));
  // httplib listens with a backlog of 5 (compiled into Debian's library): a burst of clients
  // connecting at once would see SYNs dropped and retried a second later. Listening again on
  // the bound socket raises the backlog (Linux updates it in place).
  ::listen(impl_->listen_fd, SOMAXCONN);
  return port;
}

void HttpServer::start() {
  impl_->thread = std::thread([m = impl_.get()] {
    m->http.listen_after_bind();
    m->listen_returned = true;
  });
}

void HttpServer::set_serving(const ServingModel* model) {
  impl_->serving = model;
}

void HttpServer::stop() {
  Impl& m = *impl_;
  if (!m.thread.joinable()) return;
  // stop() is a no-op until listen_after_bind has started: wait for either.
  while (!m.http.is_running() && !m.listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  m.http.stop();
  m.thread.join();
}

}  // namespace flide::server
