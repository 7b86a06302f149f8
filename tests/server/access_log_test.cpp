// The access log (server/http/access_log.h): one line a request, the client's bytes escaped so
// that a hostile path cannot forge a line, a long path cut; on a real server, on by default and
// off with --access-log off.
#include "server/http/access_log.h"

#include <gtest/gtest.h>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

TEST(AccessLog, OneEscapedLineARequest) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/systemone";
  req.remote_addr = "127.0.0.1";
  req.remote_port = 51234;
  EXPECT_EQ(server::access_log_line(req, 200, 0.0189),
            "flide serve: 127.0.0.1:51234 \"POST /v1/systemone\" 200 18.9 ms\n");

  req.path = "/x\n\"flide serve: forged\"\x1b[31m\\";
  const std::string forged = server::access_log_line(req, 404, 0);
  EXPECT_EQ(forged,
            "flide serve: 127.0.0.1:51234 \"POST /x\\x0a\\x22flide serve: forged\\x22\\x1b[31m"
            "\\x5c\" 404 0.0 ms\n");

  req.path = "/" + std::string(1000, 'a');
  const std::string long_path = server::access_log_line(req, 404, 0);
  EXPECT_LT(long_path.size(), 300u);
  EXPECT_NE(long_path.find("aaa...\" 404"), std::string::npos) << long_path;
}

TEST(AccessLog, OnByDefaultAndOffWhenAsked) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess logged;
  ServerProcess quiet("--access-log off");
  ASSERT_GT(logged.port(), 0);
  ASSERT_GT(quiet.port(), 0);
  for (ServerProcess* server : {&logged, &quiet}) {
    auto http = server->client();
    EXPECT_EQ(post(*http, "/v1/systemone", systemone_body().dump()).status, 200);
    EXPECT_EQ(get(*http, "/nowhere").status, 404);
    http.reset();
    EXPECT_EQ(server->stop(), 0) << server->stderr_text();
  }
  const std::string log = logged.stderr_text();
  EXPECT_NE(log.find("\"POST /v1/systemone\" 200 "), std::string::npos) << log;
  EXPECT_NE(log.find("\"GET /nowhere\" 404 "), std::string::npos) << log;
  const std::string quiet_log = quiet.stderr_text();
  EXPECT_EQ(quiet_log.find("\"POST /v1/systemone\""), std::string::npos) << quiet_log;
}

}  // namespace
}  // namespace flide::test
