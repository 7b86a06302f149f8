// CORS (flide serve --allowed-origins, server/http/cors.h) on a real server:
//   - by default a page of any origin gets its preflight answered (204, before the API key) and
//     reads answers (Access-Control-Allow-Origin: *); a request without Origin gets no CORS
//     headers, and an OPTIONS that is not a preflight is still a 405;
//   - a list of origins echoes an allowed origin (with Vary: Origin) and refuses the others'
//     preflights (400 naming the flag), as does "none";
//   - a value that is not an origin list is refused at start.
#include <gtest/gtest.h>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

HttpAnswer preflight(httplib::Client& http, const std::string& path, const std::string& origin) {
  const httplib::Result r = http.Options(
      path.c_str(), {{"Origin", origin},
                     {"Access-Control-Request-Method", "POST"},
                     {"Access-Control-Request-Headers", "authorization,content-type"}});
  if (!r) return {};
  return HttpAnswer{r->status, nlohmann::ordered_json::parse(r->body, nullptr, false), r->body,
                    r->headers};
}

std::string header(const HttpAnswer& a, const char* name) {
  const auto it = a.headers.find(name);
  return it == a.headers.end() ? "" : it->second;
}

TEST(Cors, AnyOriginByDefaultWithTheKeyStillRequired) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--api-key k");
  ASSERT_GT(server.port(), 0);
  auto http = server.client();

  const HttpAnswer pre = preflight(*http, "/v1/decisions", "https://app.example.com");
  EXPECT_EQ(pre.status, 204) << pre.text;
  EXPECT_EQ(header(pre, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(pre, "Access-Control-Allow-Methods"), "POST, OPTIONS");
  EXPECT_EQ(header(pre, "Access-Control-Allow-Headers"), "authorization,content-type");
  EXPECT_EQ(header(pre, "Access-Control-Max-Age"), "600");

  const httplib::Headers from_page = {{"Origin", "https://app.example.com"},
                                      {"Authorization", "Bearer k"}};
  const HttpAnswer answer = post(*http, "/v1/systemone", systemone_body().dump(), from_page);
  EXPECT_EQ(answer.status, 200) << answer.text;
  EXPECT_EQ(header(answer, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(answer, "Access-Control-Expose-Headers"), "Retry-After");
  const HttpAnswer no_key = post(*http, "/v1/systemone", systemone_body().dump(),
                                 {{"Origin", "https://app.example.com"}});
  EXPECT_EQ(no_key.status, 401) << no_key.text;
  EXPECT_EQ(header(no_key, "Access-Control-Allow-Origin"), "*");  // the page can read why

  const HttpAnswer same_origin =
      post(*http, "/v1/systemone", systemone_body().dump(), {{"Authorization", "Bearer k"}});
  EXPECT_EQ(same_origin.status, 200) << same_origin.text;
  EXPECT_EQ(header(same_origin, "Access-Control-Allow-Origin"), "");
  const httplib::Result options = http->Options("/v1/systemone");
  ASSERT_TRUE(options);
  EXPECT_EQ(options->status, 401);  // not a preflight: the key first, then 405
  const httplib::Result keyed_options =
      http->Options("/v1/systemone", {{"Authorization", "Bearer k"}});
  ASSERT_TRUE(keyed_options);
  EXPECT_EQ(keyed_options->status, 405);
  http.reset();
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

TEST(Cors, AListAllowsItsOriginsAndNoneAllowsNone) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess listed("--allowed-origins https://a.example,http://localhost:3000");
  ServerProcess closed("--allowed-origins none");
  ASSERT_GT(listed.port(), 0);
  ASSERT_GT(closed.port(), 0);
  auto http = listed.client();
  for (const char* origin : {"https://a.example", "http://localhost:3000"}) {
    const HttpAnswer pre = preflight(*http, "/v1/systemone", origin);
    EXPECT_EQ(pre.status, 204) << origin;
    EXPECT_EQ(header(pre, "Access-Control-Allow-Origin"), origin);
    EXPECT_EQ(header(pre, "Vary"), "Origin");
    const HttpAnswer answer =
        post(*http, "/v1/systemone", systemone_body().dump(), {{"Origin", origin}});
    EXPECT_EQ(answer.status, 200) << answer.text;
    EXPECT_EQ(header(answer, "Access-Control-Allow-Origin"), origin);
  }
  const HttpAnswer refused = preflight(*http, "/v1/systemone", "https://b.example");
  EXPECT_EQ(refused.status, 400) << refused.text;
  EXPECT_NE(refused.text.find("--allowed-origins"), std::string::npos) << refused.text;
  EXPECT_EQ(header(refused, "Access-Control-Allow-Origin"), "");
  // The server still answers; the browser keeps the answer from the page.
  const HttpAnswer other =
      post(*http, "/v1/systemone", systemone_body().dump(), {{"Origin", "https://b.example"}});
  EXPECT_EQ(other.status, 200) << other.text;
  EXPECT_EQ(header(other, "Access-Control-Allow-Origin"), "");

  auto closed_http = closed.client();
  EXPECT_EQ(preflight(*closed_http, "/v1/systemone", "https://a.example").status, 400);
  EXPECT_EQ(header(post(*closed_http, "/v1/systemone", systemone_body().dump(),
                        {{"Origin", "https://a.example"}}),
                   "Access-Control-Allow-Origin"),
            "");
  http.reset();
  closed_http.reset();
  EXPECT_EQ(listed.stop(), 0) << listed.stderr_text();
  EXPECT_EQ(closed.stop(), 0) << closed.stderr_text();

  for (const char* value : {"https://a.example/", "ftp://a.example", "a.example", "*,https://a.b",
                            "https://a.example,", ""}) {
    const auto [exit_code, out] =
        run_command(std::string(FLIDE_BINARY) + " serve --model " + tiny_model_dir().string() +
                    " --port 0 --allowed-origins '" + value + "' 2>&1");
    EXPECT_EQ(exit_code, 2) << value << ": " << out;
    EXPECT_NE(out.find("--allowed-origins"), std::string::npos) << value << ": " << out;
  }
}

}  // namespace
}  // namespace flide::test
