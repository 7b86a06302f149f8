// The server's connections and its shutdown over real HTTP: more open keep-alive connections than
// a fixed pool of threads would serve still leave /health answered at once, and idle ones do not
// hold the exit; SIGTERM answers the requests already admitted while new ones and /health get
// 503; a client trickling bytes holds the exit for the drain's bound only; and a second signal
// ends the process at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Waits for the exit status after a signal sent with ServerProcess::signal, by sending none.
int exit_status(ServerProcess& server) {
  return server.stop(0);  // signal 0 only checks the process is there
}

TEST(ServeShutdown, ManyKeepAliveConnectionsLeaveHealthAnswered) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  // --max-queue 2 once meant a pool of 2 x 2 + 16 = 20 threads, each held by an open connection
  // until it idled out (5 s): connection 21 waited that long for an answer.
  ServerProcess server("--max-queue 2");
  ASSERT_GT(server.port(), 0);
  constexpr int kConnections = 60;
  std::vector<std::unique_ptr<RawConnection>> open;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < kConnections; ++i) {
    open.push_back(std::make_unique<RawConnection>(server.port()));
    open.back()->send(raw_get("/health"));  // keep-alive: it stays open
    const std::string response = open.back()->receive();
    ASSERT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << "connection " << i << ": " << response;
  }
  EXPECT_LT(seconds_since(start), 4.0);
  std::unique_ptr<httplib::Client> http = server.client();
  const Clock::time_point probe = Clock::now();
  EXPECT_EQ(get(*http, "/health").status, 200);
  EXPECT_LT(seconds_since(probe), 2.0);
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

// httplib's keep-alive wait looked at the server's socket only before it began, so each idle
// connection held the exit for up to its 5 s keep-alive timeout; KeepAliveServer looks every 10 ms.
TEST(ServeShutdown, IdleKeepAliveConnectionsDoNotHoldTheExit) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server.port()));
    idle.back()->send(raw_get("/health"));
    ASSERT_EQ(idle.back()->receive().rfind("HTTP/1.1 200", 0), 0u);
  }
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
  EXPECT_LT(seconds_since(start), 2.5);
}

TEST(ServeShutdown, AStopAnswersTheAdmittedRequestsAndHealthIs503) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  std::unique_ptr<httplib::Client> watch = server.client();
  HttpAnswer heavy;
  std::thread heavy_thread([&] {
    const auto http = server.client();
    heavy = post(*http, "/v1/systemone", heavy_body().dump());
  });
  // Running once its queue wait is observed; then one more request waits behind it.
  wait_for_metric(*watch, "flide_queue_wait_seconds_count", 1);
  HttpAnswer queued;
  std::thread queued_thread([&] {
    const auto http = server.client();
    queued = post(*http, "/v1/systemone", systemone_body().dump());
  });
  wait_for_metric(*watch, "flide_queue_depth", 1);

  server.signal(SIGTERM);
  HttpAnswer health;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    health = get(*watch, "/health");
    if (health.status != 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const HttpAnswer refused = post(*watch, "/v1/systemone", systemone_body().dump());
  heavy_thread.join();
  queued_thread.join();
  EXPECT_EQ(health.status, 503) << health.text;
  EXPECT_EQ(health.body["error"]["type"], "unavailable_error") << health.text;
  EXPECT_NE(health.text.find("shutting down"), std::string::npos) << health.text;
  EXPECT_EQ(heavy.status, 200) << heavy.text;      // the running round finished,
  EXPECT_EQ(queued.status, 200) << queued.text;    // the admitted request ran,
  EXPECT_EQ(refused.status, 503) << refused.text;  // and admission was closed
  watch.reset();
  EXPECT_EQ(exit_status(server), 0) << server.stderr_text();
}

TEST(ServeShutdown, ATricklingClientHoldsTheExitForTheDrainBoundOnly) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  // A request's headers, one byte a second: httplib's 5 s read timeout restarts with each.
  RawConnection slow(server.port());
  slow.send("GET /health HTTP/1.1\r\n");
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    while (!done) {
      slow.send("X");
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const Clock::time_point start = Clock::now();
  const int status = server.stop(SIGTERM);
  const double took = seconds_since(start);
  done = true;
  trickle.join();
  EXPECT_EQ(status, 0) << server.stderr_text();
  EXPECT_GT(took, 9.0);  // the drain's 10 s
  EXPECT_LT(took, 20.0);
  EXPECT_NE(server.stderr_text().find("connections still open after 10 s"), std::string::npos)
      << server.stderr_text();
}

TEST(ServeShutdown, ASecondSignalExitsAtOnce) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  RawConnection slow(server.port());
  slow.send("GET /health HTTP/1.1\r\n");  // holds the drain for up to 10 s
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  server.signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Clock::time_point start = Clock::now();
  const int status = server.stop(SIGINT);
  EXPECT_LT(seconds_since(start), 2.0);
  EXPECT_EQ(status, 1) << server.stderr_text();
  EXPECT_NE(server.stderr_text().find("second signal, exiting now"), std::string::npos)
      << server.stderr_text();
}

}  // namespace
}  // namespace flide::test
