// The server under load, over real HTTP: /metrics counters move with what was answered (and a
// refused request adds no prompt tokens), a full queue refuses with 429 and Retry-After while
// validation still comes first, and a client that disconnects has its request dropped before it
// runs. A long request keeps the engine busy; the tests wait for it to be running by watching
// /metrics (its queue wait is observed when its round starts), not by sleeping.
#include <gtest/gtest.h>

#include <thread>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

const std::string kSystemOne200 = "flide_requests_total{route=\"/v1/systemone\",status=\"200\"}";

TEST(ServeLoad, MetricsCountAnsweredRequestsAndNoRefusedPromptTokens) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--max-questions 8");
  ASSERT_GT(server.port(), 0);
  std::unique_ptr<httplib::Client> http = server.client();

  const std::string before = metrics_text(*http);
  const HttpAnswer good = post(*http, "/v1/systemone", systemone_body().dump());
  ASSERT_EQ(good.status, 200) << good.text;
  const double input = good.body["usage"]["input_tokens"].get<double>();
  const std::string after = metrics_text(*http);
  EXPECT_EQ(metric(after, kSystemOne200), metric(before, kSystemOne200) + 1);
  EXPECT_EQ(metric(after, "flide_questions_total"), metric(before, "flide_questions_total") + 3);
  EXPECT_EQ(metric(after, "flide_prompt_tokens_total"),
            metric(before, "flide_prompt_tokens_total") + input);
  // Fork mode computes each token once: the stream holds the request's input tokens.
  EXPECT_EQ(metric(after, "flide_tokens_computed_total"),
            metric(before, "flide_tokens_computed_total") + input);
  EXPECT_GT(metric(after, "flide_trunk_tokens_shared_total"),
            metric(before, "flide_trunk_tokens_shared_total"));
  EXPECT_EQ(metric(after, "flide_round_requests_count"),
            metric(before, "flide_round_requests_count") + 1);
  EXPECT_EQ(metric(after, "flide_request_duration_seconds_count{route=\"/v1/systemone\"}"),
            metric(before, "flide_request_duration_seconds_count{route=\"/v1/systemone\"}") + 1);

  // Refusals: counted by status, and nothing reaches the engine.
  ordered_json invalid = systemone_body();
  invalid["questions"]["route"]["type"] = "essay";
  ordered_json too_many = systemone_body();
  for (int q = 0; q < 9; ++q)
    too_many["questions"][std::to_string(q)] = {{"type", "noul"}, {"instructions", "True?"}};
  EXPECT_EQ(post(*http, "/v1/systemone", invalid.dump()).status, 422);
  EXPECT_EQ(post(*http, "/v1/systemone", too_many.dump()).status, 413);
  EXPECT_EQ(post(*http, "/v1/systemone", "{\"state\": ").status, 400);
  EXPECT_EQ(post(*http, "/v1/decisions", R"({"model": "other", "input": "x", "questions": [
      {"type": "predicate", "instructions": "True?"}]})")
                .status,
            404);
  EXPECT_EQ(get(*http, "/nowhere").status, 404);
  const std::string refused = metrics_text(*http);
  for (const char* unchanged : {"flide_prompt_tokens_total", "flide_questions_total",
                                "flide_tokens_computed_total", "flide_round_requests_count"})
    EXPECT_EQ(metric(refused, unchanged), metric(after, unchanged)) << unchanged;
  for (const char* status : {"422", "413", "400"})
    EXPECT_EQ(
        metric(refused, std::string("flide_requests_total{route=\"/v1/systemone\",status=\"") +
                            status + "\"}"),
        1)
        << status;
  EXPECT_EQ(metric(refused, "flide_requests_total{route=\"/v1/decisions\",status=\"404\"}"), 1);
  EXPECT_EQ(metric(refused, "flide_requests_total{route=\"other\",status=\"404\"}"), 1);
  EXPECT_EQ(metric(refused, "flide_queue_depth"), 0);
  http.reset();
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

TEST(ServeLoad, AFullQueueRefusesWith429AndRetryAfterButValidatesFirst) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--max-queue 1");
  ASSERT_GT(server.port(), 0);
  std::unique_ptr<httplib::Client> watch = server.client();

  HttpAnswer heavy;
  std::thread heavy_thread([&] {
    const auto http = server.client();
    heavy = post(*http, "/v1/systemone", heavy_body().dump());
  });
  ASSERT_TRUE(wait_for_metric(*watch, "flide_queue_wait_seconds_count", 1));

  // While the long round runs: one light request can wait, the rest of the burst is refused;
  // invalid bodies are still 400/422, never 429.
  constexpr int kBurst = 8;
  std::vector<HttpAnswer> burst(kBurst);
  HttpAnswer malformed, invalid;
  std::vector<std::thread> threads;
  for (int i = 0; i < kBurst; ++i)
    threads.emplace_back([&, i] {
      const auto http = server.client();
      burst[size_t(i)] = post(*http, "/v1/systemone", systemone_body().dump());
    });
  threads.emplace_back([&] {
    const auto http = server.client();
    malformed = post(*http, "/v1/systemone", "{\"state\": \"unterminated");
    ordered_json body = systemone_body();
    body["questions"]["angry"]["instructions"] = "";
    invalid = post(*http, "/v1/systemone", body.dump());
  });
  for (std::thread& t : threads) t.join();
  heavy_thread.join();

  ASSERT_EQ(heavy.status, 200) << heavy.text;
  double prompt_tokens = heavy.body["usage"]["input_tokens"].get<double>();
  int refused = 0;
  for (const HttpAnswer& answer : burst) {
    if (answer.status == 429) {
      ++refused;
      EXPECT_EQ(answer.body["error"]["type"], "rate_limit_error");
      EXPECT_EQ(answer.body["error"]["code"], 429);
      EXPECT_NE(answer.body["error"]["message"].get<std::string>().find("--max-queue"),
                std::string::npos);
      const auto retry_after = answer.headers.find("Retry-After");
      ASSERT_NE(retry_after, answer.headers.end());
      EXPECT_GE(std::stoi(retry_after->second), 1);
      continue;
    }
    ASSERT_EQ(answer.status, 200) << answer.text;
    EXPECT_EQ(answer.body["answers"].size(), 3u);
    EXPECT_EQ(answer.headers.count("Retry-After"), 0u);
    prompt_tokens += answer.body["usage"]["input_tokens"].get<double>();
  }
  EXPECT_GE(refused, kBurst - 2);  // the queue holds one; a second may come after the round
  EXPECT_EQ(malformed.status, 400) << malformed.text;
  EXPECT_EQ(invalid.status, 422) << invalid.text;

  const std::string metrics = metrics_text(*watch);
  EXPECT_EQ(metric(metrics, "flide_requests_total{route=\"/v1/systemone\",status=\"429\"}"),
            refused);
  EXPECT_EQ(metric(metrics, "flide_prompt_tokens_total"), prompt_tokens);
  EXPECT_EQ(metric(metrics, "flide_queue_depth"), 0);
  watch.reset();
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

TEST(ServeLoad, ADisconnectedClientsRequestIsDroppedBeforeItRuns) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server;
  ASSERT_GT(server.port(), 0);
  std::unique_ptr<httplib::Client> watch = server.client();

  HttpAnswer heavy;
  std::thread heavy_thread([&] {
    const auto http = server.client();
    heavy = post(*http, "/v1/systemone", heavy_body().dump());
  });
  ASSERT_TRUE(wait_for_metric(*watch, "flide_queue_wait_seconds_count", 1));

  // A request admitted behind the long round, whose client then hangs up.
  const std::string body = systemone_body().dump();
  RawConnection gone(server.port());
  gone.send(raw_post("/v1/systemone", body));
  ASSERT_TRUE(wait_for_metric(*watch, "flide_queue_depth", 1));
  gone.close();
  heavy_thread.join();
  ASSERT_EQ(heavy.status, 200) << heavy.text;

  ASSERT_TRUE(wait_for_metric(*watch, "flide_requests_dropped_total", 1));
  ASSERT_TRUE(
      wait_for_metric(*watch, "flide_requests_total{route=\"/v1/systemone\",status=\"499\"}", 1));
  const std::string metrics = metrics_text(*watch);
  EXPECT_EQ(metric(metrics, "flide_requests_dropped_total"), 1);
  EXPECT_EQ(metric(metrics, "flide_questions_total"), 1);  // the long request's only
  EXPECT_EQ(metric(metrics, "flide_prompt_tokens_total"),
            heavy.body["usage"]["input_tokens"].get<double>());
  EXPECT_EQ(post(*watch, "/v1/systemone", body).status, 200);  // and it keeps serving
  watch.reset();
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

}  // namespace
}  // namespace flide::test
