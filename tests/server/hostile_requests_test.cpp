// Malformed and hostile requests against a real server: each gets the right status, the error
// body of its route ({"error": {"message", "type", "code"}}, OpenAI's with "param" on
// /v1/decisions) and a message naming the field or limit at fault; the server answers a good
// request afterwards. Run with a small --max-questions so the count limit is cheap to reach.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

struct Case {
  std::string name;
  std::function<HttpAnswer(httplib::Client&, int port)> send;
  int status;
  std::string type;
  std::vector<std::string> needles;  // the message contains each
  bool openai = false;               // OpenAI's error body (/v1/decisions)
};

HttpAnswer post_json(httplib::Client& http, const std::string& path, const std::string& body) {
  return post(http, path, body);
}

HttpAnswer answer_of(const httplib::Result& result) {
  HttpAnswer answer;
  if (!result) return answer;
  answer.status = result->status;
  answer.text = result->body;
  answer.body = ordered_json::parse(result->body, nullptr, false);
  return answer;
}

// Spaces sent with chunked transfer encoding: no length for httplib to check up front.
HttpAnswer post_chunked(httplib::Client& http, const std::string& path, size_t bytes) {
  const std::string block(1 << 16, ' ');
  size_t sent = 0;
  return answer_of(http.Post(
      path,
      [&](size_t, httplib::DataSink& sink) {
        const size_t n = std::min(block.size(), bytes - sent);
        sink.write(block.data(), n);
        sent += n;
        if (sent == bytes) sink.done();
        return true;
      },
      "application/json"));
}

Case systemone(std::string name, const ordered_json& body, int status,
               std::vector<std::string> needles) {
  return {std::move(name),
          [text = body.dump()](httplib::Client& http, int) {
            return post_json(http, "/v1/systemone", text);
          },
          status,
          status == 422   ? "unprocessable_entity_error"
          : status == 413 ? "request_too_large_error"
                          : "invalid_request_error",
          std::move(needles)};
}

Case decisions(std::string name, const ordered_json& body, int status,
               std::vector<std::string> needles) {
  return {std::move(name),
          [text = body.dump()](httplib::Client& http, int) {
            return post_json(http, "/v1/decisions", text);
          },
          status,
          status == 404 ? "not_found_error" : "invalid_request_error",
          std::move(needles),
          true};
}

Case raw_body(std::string name, std::string path, std::string body, int status, std::string type,
              std::vector<std::string> needles) {
  const bool openai = path == "/v1/decisions";
  return {std::move(name),
          [path = std::move(path), body = std::move(body)](httplib::Client& http, int) {
            return post_json(http, path, body);
          },
          status,
          std::move(type),
          std::move(needles),
          openai};
}

// A POST with neither Content-Length nor Transfer-Encoding (`curl -X POST`): an empty body.
Case post_without_length(std::string name, std::string path, int status, std::string type,
                         std::vector<std::string> needles) {
  const bool openai = path == "/v1/decisions";
  return {std::move(name),
          [path = std::move(path)](httplib::Client&, int port) {
            RawConnection connection(port);
            connection.send("POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            return parse_response(connection.receive());
          },
          status,
          std::move(type),
          std::move(needles),
          openai};
}

// A systemone body with one field replaced (null `value` removes it).
ordered_json with(const std::string& pointer, const ordered_json& value) {
  ordered_json body = systemone_body();
  const ordered_json::json_pointer at(pointer);
  if (value.is_null())
    body[at.parent_pointer()].erase(at.back());
  else
    body[at] = value;
  return body;
}

ordered_json decisions_with(const std::string& pointer, const ordered_json& value) {
  ordered_json body = decisions_body("flide-tiny-random");
  const ordered_json::json_pointer at(pointer);
  if (value.is_null())
    body[at.parent_pointer()].erase(at.back());
  else
    body[at] = value;
  return body;
}

ordered_json options(int n) {
  ordered_json criteria = ordered_json::object();
  for (int i = 0; i < n; ++i) criteria["option" + std::to_string(i)] = nullptr;
  return criteria;
}

ordered_json nested(int depth) {
  ordered_json value = "deep";
  for (int i = 0; i < depth; ++i) value = ordered_json::array({value});
  return value;
}

ordered_json many_questions(int n) {
  ordered_json questions = ordered_json::object();
  for (int i = 0; i < n; ++i)
    questions[std::to_string(i)] = {{"type", "noul"}, {"instructions", "Is it true?"}};
  return questions;
}

std::vector<Case> cases() {
  const std::string ten_mb(10 << 20, ' ');
  std::vector<Case> c;
  // The HTTP layer: bodies, encodings, methods, routes.
  c.push_back(raw_body("not JSON", "/v1/systemone", "state: hello", 400, "invalid_request_error",
                       {"not valid JSON"}));
  c.push_back(raw_body("empty body", "/v1/systemone", "", 400, "invalid_request_error", {"empty"}));
  c.push_back(post_without_length("no body, no Content-Length", "/v1/decisions", 400,
                                  "invalid_request_error", {"empty"}));
  c.push_back(post_without_length("no body on an unknown route", "/v1/nope", 404, "not_found_error",
                                  {"/v1/nope"}));
  c.push_back(raw_body("unterminated JSON", "/v1/systemone", R"({"state": "unterminated)", 400,
                       "invalid_request_error", {"not valid JSON"}));
  c.push_back(raw_body("trailing garbage", "/v1/systemone", R"({"state": "a"} x)", 400,
                       "invalid_request_error", {"not valid JSON"}));
  // Valid JSON by RFC 8259's grammar, but past a double's range (which §6 lets a reader refuse).
  c.push_back(raw_body("number past a double's range", "/v1/systemone", R"({"state": 1e999})", 400,
                       "invalid_request_error", {"number", "1e999"}));
  c.push_back(raw_body("invalid UTF-8 byte", "/v1/systemone", "{\"state\": \"caf\xff\"}", 400,
                       "invalid_request_error", {"UTF-8", "0xFF"}));
  c.push_back(raw_body("stray continuation byte", "/v1/systemone", "{\"state\": \"\x80\"}", 400,
                       "invalid_request_error", {"UTF-8"}));
  c.push_back(raw_body("overlong encoding", "/v1/systemone", "{\"state\": \"\xc0\xaf\"}", 400,
                       "invalid_request_error", {"UTF-8"}));
  c.push_back(raw_body("UTF-16 surrogate escape", "/v1/systemone", R"({"state": "\ud800"})", 400,
                       "invalid_request_error", {"surrogate"}));
  c.push_back(raw_body("invalid UTF-8 on decisions", "/v1/decisions", "{\"input\": \"\xfe\"}", 400,
                       "invalid_request_error", {"UTF-8"}));
  c.push_back(raw_body("10 MB body", "/v1/systemone", ten_mb, 413, "request_too_large_error",
                       {"--max-body-bytes", "4194304"}));
  c.push_back(
      {"10 MB chunked body",
       [](httplib::Client& http, int) { return post_chunked(http, "/v1/systemone", 10 << 20); },
       413,
       "request_too_large_error",
       {"--max-body-bytes"}});
  c.push_back({"gzip bomb",
               [](httplib::Client&, int port) {
                 // 64 MB of spaces compress to ~64 KB; the limit applies to what they inflate to.
                 httplib::Client zipped("127.0.0.1", port);
                 zipped.set_compress(true);
                 zipped.set_read_timeout(60);
                 return post(zipped, "/v1/systemone", std::string(64 << 20, ' '));
               },
               413,
               "request_too_large_error",
               {"--max-body-bytes"}});
  c.push_back(
      {"corrupt gzip",
       [](httplib::Client& http, int) {
         return post(http, "/v1/systemone", "this is not gzip", {{"Content-Encoding", "gzip"}});
       },
       400,
       "invalid_request_error",
       {"could not be read"}});
  c.push_back({"multipart form",
               [](httplib::Client& http, int) {
                 return post(http, "/v1/systemone",
                             "--xx\r\nContent-Disposition: form-data; name=\"state\"\r\n\r\nhi\r\n"
                             "--xx--\r\n",
                             {}, "multipart/form-data; boundary=xx");
               },
               415,
               "invalid_request_error",
               {"multipart/form-data", "JSON"}});
  c.push_back({"GET on a POST route",
               [](httplib::Client& http, int) { return get(http, "/v1/systemone"); },
               405,
               "method_not_allowed_error",
               {"GET", "POST"}});
  c.push_back({"PUT on a POST route",
               [](httplib::Client& http, int) {
                 return answer_of(http.Put("/v1/decisions", "{}", "application/json"));
               },
               405,
               "method_not_allowed_error",
               {"PUT", "POST"},
               true});
  c.push_back({"DELETE on a POST route",
               [](httplib::Client& http, int) { return answer_of(http.Delete("/v1/systemone")); },
               405,
               "method_not_allowed_error",
               {"DELETE"}});
  c.push_back(raw_body("POST on a GET route", "/health", "{}", 405, "method_not_allowed_error",
                       {"POST", "GET"}));
  c.push_back(raw_body("POST on /v1/models", "/v1/models", "{}", 405, "method_not_allowed_error",
                       {"/v1/models"}));
  c.push_back({"unknown route",
               [](httplib::Client& http, int) { return get(http, "/v2/everything"); },
               404,
               "not_found_error",
               {"/v2/everything"}});
  c.push_back(raw_body("OpenAI chat route", "/v1/chat/completions", "{}", 404, "not_found_error",
                       {"/v1/chat/completions"}));
  c.push_back({"route with a suffix",
               [](httplib::Client& http, int) { return get(http, "/v1/systemone/extra"); },
               404,
               "not_found_error",
               {"/v1/systemone/extra"}});
  // Bodies that are JSON but not the right JSON, on the auxiliary routes.
  c.push_back(raw_body("tokenize without content", "/tokenize", "{}", 400, "invalid_request_error",
                       {"content", "prompt"}));
  c.push_back(raw_body("tokenize a number", "/tokenize", R"({"content": 42})", 400,
                       "invalid_request_error", {"content"}));
  c.push_back(raw_body("tokenize an array body", "/tokenize", "[1, 2]", 400,
                       "invalid_request_error", {"object"}));
  c.push_back(raw_body("tokenize with_pieces not bool", "/tokenize",
                       R"({"content": "a", "with_pieces": "yes"})", 400, "invalid_request_error",
                       {"with_pieces"}));
  c.push_back(raw_body("detokenize without tokens", "/detokenize", "{}", 400,
                       "invalid_request_error", {"tokens"}));
  c.push_back(raw_body("detokenize an id out of range", "/detokenize",
                       R"({"tokens": [1, 99999999]})", 400, "invalid_request_error",
                       {"tokens[1]"}));
  c.push_back(raw_body("detokenize a string id", "/detokenize", R"({"tokens": ["a"]})", 400,
                       "invalid_request_error", {"tokens[0]"}));
  // Nesting, checked on the raw text before parsing.
  c.push_back(raw_body("5000-deep body", "/v1/systemone",
                       std::string(5000, '[') + std::string(5000, ']'), 422,
                       "unprocessable_entity_error", {"nested too deeply"}));
  c.push_back(
      systemone("40-deep state", with("/state", nested(40)), 422, {"state", "nested too deeply"}));
  c.push_back(raw_body("100000-deep tokenize body", "/tokenize", std::string(100000, '{'), 422,
                       "unprocessable_entity_error", {"nested too deeply"}));
  // A sample of System One's validation (routes/systemone.cpp owns the full set).
  c.push_back(systemone("body is an array", ordered_json::array({1}), 422, {}));
  c.push_back(systemone("no state", with("/state", nullptr), 422, {"state"}));
  c.push_back(systemone("empty state", with("/state", ""), 422, {"state"}));
  c.push_back(systemone("no questions", with("/questions", nullptr), 422, {"questions"}));
  c.push_back(
      systemone("empty questions", with("/questions", ordered_json::object()), 422, {"questions"}));
  c.push_back(systemone("model not a string", with("/model", 123), 422, {"model"}));
  c.push_back(systemone("unknown type", with("/questions/route/type", "multiple"), 422,
                        {"questions.route", "type"}));
  c.push_back(systemone("choice without criteria", with("/questions/route/criteria", nullptr), 422,
                        {"criteria"}));
  c.push_back(systemone("0 options", with("/questions/route/criteria", ordered_json::object()), 422,
                        {"criteria"}));
  c.push_back(systemone("53 options", with("/questions/route/criteria", options(53)), 422,
                        {"at most 52 are supported"}));
  c.push_back(systemone("1 score level",
                        with("/questions/urgency/criteria", ordered_json::array({"low"})), 422,
                        {"criteria"}));
  c.push_back(systemone("11 score levels",
                        with("/questions/urgency/criteria", ordered_json(std::vector<int>(11, 1))),
                        422, {"criteria"}));
  c.push_back(systemone("empty instructions", with("/questions/angry/instructions", ""), 422,
                        {"instructions"}));
  c.push_back(systemone("numeric instructions", with("/questions/angry/instructions", 0), 422,
                        {"instructions"}));
  c.push_back(
      systemone("videos given", with("/videos", ordered_json::array({"x"})), 422, {"videos"}));
  c.push_back(systemone("too many questions", with("/questions", many_questions(9)), 413,
                        {"questions", "--max-questions"}));
  // A sample of OpenAI's (routes/decisions.cpp owns the full set).
  c.push_back(decisions("no input", decisions_with("/input", nullptr), 400, {"input"}));
  c.push_back(decisions("questions empty", decisions_with("/questions", ordered_json::array()), 400,
                        {"questions"}));
  c.push_back(decisions(
      "one choice",
      decisions_with("/questions/1/choices", ordered_json::parse(R"([{"value": "only"}])")), 400,
      {"choices"}));
  c.push_back(decisions("duplicate choice values",
                        decisions_with("/questions/1/choices",
                                       ordered_json::parse(R"([{"value": "a"}, {"value": "a"}])")),
                        400, {"choices[1].value"}));
  c.push_back(decisions("unknown question type", decisions_with("/questions/0/type", "essay"), 400,
                        {"questions[0]", "type"}));
  c.push_back(decisions("model not a string", decisions_with("/model", 7), 400, {"model"}));
  c.push_back(
      decisions("another model", decisions_with("/model", "gpt-6-luna"), 404, {"gpt-6-luna"}));
  return c;
}

TEST(HostileRequests, EachGetsItsStatusAndAMessageNamingTheField) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--max-questions 8");
  ASSERT_GT(server.port(), 0);
  const std::vector<Case> all = cases();
  ASSERT_GE(all.size(), 40u);
  for (const Case& c : all) {
    SCOPED_TRACE(c.name);
    const std::unique_ptr<httplib::Client> http = server.client();
    const HttpAnswer answer = c.send(*http, server.port());
    EXPECT_EQ(answer.status, c.status) << answer.text;
    ASSERT_TRUE(answer.body.is_object()) << answer.text;
    EXPECT_EQ(answer.body.size(), 1u) << answer.text;  // only "error"
    const ordered_json& error = answer.body["error"];
    EXPECT_EQ(error.size(), c.openai ? 4u : 3u) << answer.text;
    EXPECT_EQ(error["type"], c.type) << answer.text;
    if (c.openai)
      EXPECT_TRUE(error.contains("param")) << answer.text;
    else
      EXPECT_EQ(error["code"], c.status) << answer.text;
    const std::string message = error["message"].get<std::string>();
    EXPECT_FALSE(message.empty());
    for (const std::string& needle : c.needles)
      EXPECT_NE(message.find(needle), std::string::npos) << "\"" << needle << "\" in " << message;
  }
  std::unique_ptr<httplib::Client> http = server.client();
  const HttpAnswer good = post(*http, "/v1/systemone", systemone_body().dump());
  EXPECT_EQ(good.status, 200) << good.text;
  EXPECT_EQ(get(*http, "/health").status, 200);
  http.reset();  // an idle keep-alive connection would hold the shutdown for its timeout
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

// Requests httplib refuses before any route runs still get a JSON error body.
TEST(HostileRequests, MalformedHttpIsAnsweredWithAJsonError) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"garbage request line", "HELLO\r\n\r\n"},
      {"unknown method", "BREW /v1/systemone HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"unsupported HTTP version", "GET /health HTTP/2.0\r\n\r\n"},
      {"no HTTP version", "GET /health\r\n\r\n"},
      {"unsatisfiable range", "GET /health HTTP/1.1\r\nRange: bytes=zz\r\n\r\n"},
      {"URI too long", "GET /" + std::string(10000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n"},
  };
  for (const auto& [name, bytes] : requests) {
    SCOPED_TRACE(name);
    RawConnection connection(server.port());
    connection.send(bytes);
    const std::string response = connection.receive();
    ASSERT_EQ(response.rfind("HTTP/1.1 4", 0), 0u) << response;
    const size_t body_at = response.find("\r\n\r\n");
    ASSERT_NE(body_at, std::string::npos) << response;
    const ordered_json body = ordered_json::parse(response.substr(body_at + 4), nullptr, false);
    ASSERT_TRUE(body.is_object()) << response;
    EXPECT_TRUE(body["error"]["message"].is_string()) << response;
    EXPECT_EQ(body["error"]["code"], std::stoi(response.substr(9, 3))) << response;
  }
  const std::unique_ptr<httplib::Client> http = server.client();
  EXPECT_EQ(post(*http, "/v1/systemone", systemone_body().dump()).status, 200);
}

// With --api-key, every route but /health and /v1/models needs `Authorization: Bearer KEY`
// (llama.cpp leaves the same two open).
TEST(HostileRequests, ApiKeyIsRequiredWhereLlamaCppRequiresIt) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--api-key s3cret");
  ASSERT_GT(server.port(), 0);
  const std::unique_ptr<httplib::Client> http = server.client();
  const std::string body = systemone_body().dump();
  const std::vector<std::pair<std::string, httplib::Headers>> refused = {
      {"no header", {}},
      {"wrong key", {{"Authorization", "Bearer wrong"}}},
      {"key as a prefix", {{"Authorization", "Bearer s3cretX"}}},
      {"basic scheme", {{"Authorization", "Basic s3cret"}}},
      {"bare key", {{"Authorization", "s3cret"}}},
  };
  for (const auto& [name, headers] : refused) {
    SCOPED_TRACE(name);
    const HttpAnswer answer = post(*http, "/v1/systemone", body, headers);
    EXPECT_EQ(answer.status, 401) << answer.text;
    EXPECT_EQ(answer.body["error"]["type"], "authentication_error");
    EXPECT_NE(answer.body["error"]["message"].get<std::string>().find("API Key"),
              std::string::npos);
    EXPECT_EQ(answer.headers.find("WWW-Authenticate")->second, "Bearer");
  }
  EXPECT_EQ(get(*http, "/metrics").status, 401);
  EXPECT_EQ(get(*http, "/no/such/route").status, 401);  // the key first: routes stay hidden
  EXPECT_EQ(post(*http, "/tokenize", R"({"content": "a"})").status, 401);
  EXPECT_EQ(get(*http, "/health").status, 200);
  EXPECT_EQ(get(*http, "/v1/models").status, 200);
  const httplib::Headers key = {{"Authorization", "Bearer s3cret"}};
  EXPECT_EQ(post(*http, "/v1/systemone", body, key).status, 200);
  EXPECT_EQ(get(*http, "/metrics", key).status, 200);
}

}  // namespace
}  // namespace flide::test
