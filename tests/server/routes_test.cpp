// Every route of a real `flide serve` over loopback HTTP: the exact shapes of the answers, the
// probabilities (sum to 1 within 1e-6: they are a softmax computed in float32 and rendered
// unrounded), the confidences recomputed from the returned probabilities (1e-6, as llama.cpp's
// conformance test), and fork and independent servers answering alike.
#include <gtest/gtest.h>

#include <set>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

std::set<std::string> keys_of(const ordered_json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

std::vector<double> values_of(const ordered_json& probabilities) {
  std::vector<double> p;
  for (const auto& [key, value] : probabilities.items()) p.push_back(value.get<double>());
  return p;
}

double sum(const std::vector<double>& p) {
  double s = 0;
  for (double x : p) s += x;
  return s;
}

class RoutesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (tiny_model_present()) server_ = new ServerProcess();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    FLIDE_SKIP_WITHOUT_TINY_MODEL();
    ASSERT_GT(server_->port(), 0);
    http_ = server_->client();
  }
  static ServerProcess* server_;
  std::unique_ptr<httplib::Client> http_;
};

ServerProcess* RoutesTest::server_ = nullptr;

TEST_F(RoutesTest, HealthModelsAndMetrics) {
  const HttpAnswer health = get(*http_, "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, ordered_json::parse(R"({"status": "ok"})"));

  const HttpAnswer models = get(*http_, "/v1/models");
  ASSERT_EQ(models.status, 200) << models.text;
  EXPECT_EQ(keys_of(models.body), (std::set<std::string>{"object", "data"}));
  EXPECT_EQ(models.body["object"], "list");
  ASSERT_EQ(models.body["data"].size(), 1u);
  const ordered_json& model = models.body["data"][0];
  EXPECT_EQ(keys_of(model), (std::set<std::string>{"id", "object", "created", "owned_by"}));
  EXPECT_EQ(model["id"], "flide-tiny-random");
  EXPECT_EQ(model["object"], "model");
  EXPECT_TRUE(model["created"].is_number_integer());

  const httplib::Result metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  for (const char* family :
       {"flide_requests_total counter", "flide_request_duration_seconds histogram",
        "flide_questions_total counter", "flide_prompt_tokens_total counter",
        "flide_trunk_tokens_shared_total counter", "flide_queue_depth gauge",
        "flide_round_requests histogram", "flide_round_tokens histogram",
        "flide_round_duration_seconds histogram"})
    EXPECT_NE(metrics->body.find(std::string("# TYPE ") + family), std::string::npos) << family;
}

TEST_F(RoutesTest, SystemOneAnswersInTheWireContract) {
  const HttpAnswer answer = post(*http_, "/v1/systemone", systemone_body().dump());
  ASSERT_EQ(answer.status, 200) << answer.text;
  EXPECT_EQ(answer.headers.find("Content-Type")->second, "application/json; charset=utf-8");
  const ordered_json& body = answer.body;
  EXPECT_EQ(keys_of(body), (std::set<std::string>{"model", "answers", "usage"}));
  EXPECT_EQ(body["model"], "flide-tiny-random");
  EXPECT_EQ(keys_of(body["usage"]), (std::set<std::string>{"input_tokens", "output_tokens"}));
  EXPECT_GT(body["usage"]["input_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(body["usage"]["output_tokens"], 0);

  const ordered_json& answers = body["answers"];
  std::vector<std::string> order;
  for (const auto& [key, value] : answers.items()) order.push_back(key);
  EXPECT_EQ(order, (std::vector<std::string>{"route", "urgency", "angry"}));  // request order

  const ordered_json& route = answers["route"];
  EXPECT_EQ(keys_of(route),
            (std::set<std::string>{"type", "choice", "probabilities", "confidence"}));
  EXPECT_EQ(route["type"], "choice");
  std::vector<std::string> options;
  for (const auto& [key, value] : route["probabilities"].items()) options.push_back(key);
  EXPECT_EQ(options, (std::vector<std::string>{"billing", "shipping", "technical"}));
  const std::vector<double> p_route = values_of(route["probabilities"]);
  EXPECT_NEAR(sum(p_route), 1.0, 1e-6);
  const size_t top = size_t(std::max_element(p_route.begin(), p_route.end()) - p_route.begin());
  EXPECT_EQ(route["choice"], options[top]);
  EXPECT_NEAR(route["confidence"].get<double>(), choice_confidence(p_route), 1e-6);

  const ordered_json& urgency = answers["urgency"];
  EXPECT_EQ(keys_of(urgency),
            (std::set<std::string>{"type", "score", "legend", "probabilities", "confidence"}));
  EXPECT_EQ(urgency["legend"], ordered_json::parse(R"({"0": "can wait", "1": "this week",
                                                       "2": "today", "3": "right now"})"));
  const std::vector<double> p_urgency = values_of(urgency["probabilities"]);
  ASSERT_EQ(p_urgency.size(), 4u);
  EXPECT_NEAR(sum(p_urgency), 1.0, 1e-6);
  double expected_score = 0;
  for (size_t i = 0; i < p_urgency.size(); ++i) expected_score += double(i) * p_urgency[i];
  EXPECT_NEAR(urgency["score"].get<double>(), expected_score, 1e-6);
  EXPECT_NEAR(urgency["confidence"].get<double>(), score_confidence(p_urgency), 1e-6);

  const ordered_json& angry = answers["angry"];
  EXPECT_EQ(keys_of(angry), (std::set<std::string>{"type", "noul"}));
  EXPECT_GE(angry["noul"].get<double>(), 0.0);
  EXPECT_LE(angry["noul"].get<double>(), 1.0);
}

TEST_F(RoutesTest, DecisionsAnswersInOpenAIsSchema) {
  const HttpAnswer answer =
      post(*http_, "/v1/decisions", decisions_body("flide-tiny-random").dump());
  ASSERT_EQ(answer.status, 200) << answer.text;
  const ordered_json& body = answer.body;
  EXPECT_EQ(keys_of(body), (std::set<std::string>{"model", "answers", "usage"}));
  EXPECT_EQ(body["model"], "flide-tiny-random");
  const ordered_json& usage = body["usage"];
  EXPECT_EQ(keys_of(usage),
            (std::set<std::string>{"input_tokens", "input_tokens_details", "output_tokens",
                                   "output_tokens_details", "total_tokens"}));
  EXPECT_EQ(keys_of(usage["input_tokens_details"]),
            (std::set<std::string>{"cached_tokens", "cache_write_tokens"}));
  EXPECT_EQ(keys_of(usage["output_tokens_details"]), (std::set<std::string>{"reasoning_tokens"}));
  EXPECT_EQ(usage["total_tokens"].get<int64_t>(),
            usage["input_tokens"].get<int64_t>() + usage["output_tokens"].get<int64_t>());

  const ordered_json& answers = body["answers"];
  ASSERT_EQ(answers.size(), 3u);
  const ordered_json& predicate = answers[0];
  EXPECT_EQ(keys_of(predicate), (std::set<std::string>{"type", "name", "probability"}));
  EXPECT_EQ(predicate["type"], "predicate");
  EXPECT_EQ(predicate["name"], "damaged");
  EXPECT_GE(predicate["probability"].get<double>(), 0.0);
  EXPECT_LE(predicate["probability"].get<double>(), 1.0);

  const ordered_json& choice = answers[1];
  EXPECT_EQ(keys_of(choice),
            (std::set<std::string>{"type", "name", "choice", "probabilities", "confidence"}));
  std::vector<double> p_choice;
  std::vector<ordered_json> values;
  for (const ordered_json& entry : choice["probabilities"]) {
    EXPECT_EQ(keys_of(entry), (std::set<std::string>{"value", "probability"}));
    values.push_back(entry["value"]);
    p_choice.push_back(entry["probability"].get<double>());
  }
  EXPECT_EQ(values, (std::vector<ordered_json>{"returns", "billing", true}));  // typed values
  EXPECT_NEAR(sum(p_choice), 1.0, 1e-6);
  EXPECT_EQ(choice["choice"],
            values[size_t(std::max_element(p_choice.begin(), p_choice.end()) - p_choice.begin())]);
  EXPECT_NEAR(choice["confidence"].get<double>(), choice_confidence(p_choice), 1e-6);

  const ordered_json& score = answers[2];
  EXPECT_EQ(keys_of(score),
            (std::set<std::string>{"type", "name", "score", "probabilities", "confidence"}));
  EXPECT_TRUE(score["name"].is_null());  // unnamed: present and null
  std::vector<double> p_score;
  for (size_t i = 0; i < score["probabilities"].size(); ++i) {
    const ordered_json& entry = score["probabilities"][i];
    EXPECT_EQ(keys_of(entry), (std::set<std::string>{"value", "label", "probability"}));
    EXPECT_EQ(entry["value"], i);
    p_score.push_back(entry["probability"].get<double>());
  }
  EXPECT_EQ(score["probabilities"][1]["label"], "broken");
  EXPECT_NEAR(sum(p_score), 1.0, 1e-6);
  EXPECT_NEAR(score["confidence"].get<double>(), score_confidence(p_score), 1e-6);
}

TEST_F(RoutesTest, TokenizeAndDetokenizeInBothServersShapes) {
  const std::string text = "I was charged twice, ünïcode and all.";
  const HttpAnswer llama = post(*http_, "/tokenize", ordered_json({{"content", text}}).dump());
  ASSERT_EQ(llama.status, 200) << llama.text;
  EXPECT_EQ(keys_of(llama.body), (std::set<std::string>{"tokens"}));
  ASSERT_FALSE(llama.body["tokens"].empty());
  for (const ordered_json& id : llama.body["tokens"]) EXPECT_TRUE(id.is_number_integer());

  const HttpAnswer vllm = post(*http_, "/tokenize", ordered_json({{"prompt", text}}).dump());
  ASSERT_EQ(vllm.status, 200) << vllm.text;
  EXPECT_EQ(keys_of(vllm.body),
            (std::set<std::string>{"count", "max_model_len", "tokens", "token_strs"}));
  EXPECT_EQ(vllm.body["tokens"], llama.body["tokens"]);
  EXPECT_EQ(vllm.body["count"], llama.body["tokens"].size());
  EXPECT_EQ(vllm.body["max_model_len"], 262144);  // the tiny config's max_position_embeddings

  const std::string ascii = "I was charged twice.";  // every piece whole UTF-8: strings
  const HttpAnswer pieces =
      post(*http_, "/tokenize", ordered_json({{"content", ascii}, {"with_pieces", true}}).dump());
  ASSERT_EQ(pieces.status, 200) << pieces.text;
  std::string joined;
  for (const ordered_json& token : pieces.body["tokens"]) {
    EXPECT_EQ(keys_of(token), (std::set<std::string>{"id", "piece"}));
    joined += token["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, ascii);

  const HttpAnswer back =
      post(*http_, "/detokenize", ordered_json({{"tokens", llama.body["tokens"]}}).dump());
  ASSERT_EQ(back.status, 200) << back.text;
  EXPECT_EQ(back.body, ordered_json({{"content", text}, {"prompt", text}}));
}

TEST_F(RoutesTest, HeadIsAnsweredLikeGet) {
  const httplib::Result head = http_->Head("/health");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
}

// Forked execution computes the state once and continues every question from it; independent
// runs each question's whole prompt. In float64 the two agree to ~1e-12 (docs/conventions.md);
// 1e-6 is the wire contract's tolerance.
TEST(ServeModes, ForkAndIndependentServersAnswerAlike) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess fork("--mode fork --dtype f64");
  ServerProcess independent("--mode independent --dtype f64");
  ASSERT_GT(fork.port(), 0);
  ASSERT_GT(independent.port(), 0);
  auto fork_http = fork.client();
  auto independent_http = independent.client();

  const HttpAnswer a = post(*fork_http, "/v1/systemone", systemone_body().dump());
  const HttpAnswer b = post(*independent_http, "/v1/systemone", systemone_body().dump());
  ASSERT_EQ(a.status, 200) << a.text;
  ASSERT_EQ(b.status, 200) << b.text;
  EXPECT_EQ(a.body["usage"], b.body["usage"]);  // a property of the request, not of the mode
  for (const char* id : {"route", "urgency"}) {
    const std::vector<double> pa = values_of(a.body["answers"][id]["probabilities"]);
    const std::vector<double> pb = values_of(b.body["answers"][id]["probabilities"]);
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_NEAR(pa[i], pb[i], 1e-6) << id << " " << i;
  }
  EXPECT_NEAR(a.body["answers"]["angry"]["noul"].get<double>(),
              b.body["answers"]["angry"]["noul"].get<double>(), 1e-6);

  const std::string decisions = decisions_body("flide-tiny-random").dump();
  const HttpAnswer c = post(*fork_http, "/v1/decisions", decisions);
  const HttpAnswer d = post(*independent_http, "/v1/decisions", decisions);
  ASSERT_EQ(c.status, 200) << c.text;
  ASSERT_EQ(d.status, 200) << d.text;
  for (size_t q = 1; q < 3; ++q)
    for (size_t i = 0; i < c.body["answers"][q]["probabilities"].size(); ++i)
      EXPECT_NEAR(c.body["answers"][q]["probabilities"][i]["probability"].get<double>(),
                  d.body["answers"][q]["probabilities"][i]["probability"].get<double>(), 1e-6);
  EXPECT_NEAR(c.body["answers"][0]["probability"].get<double>(),
              d.body["answers"][0]["probability"].get<double>(), 1e-6);

  fork_http.reset();  // idle keep-alive connections would hold the shutdown for their timeout
  independent_http.reset();
  EXPECT_EQ(fork.stop(), 0) << fork.stderr_text();
  EXPECT_EQ(independent.stop(), 0) << independent.stderr_text();
}

// --served-model-name (vLLM's, comma-separated): every name is listed and accepted, the first is
// what responses report; a name list with an empty or repeated name is refused at start.
TEST(ServeNames, ServedModelNamesAreListedAcceptedAndReported) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--served-model-name openjev-4b,jev-latest");
  ASSERT_GT(server.port(), 0);
  auto http = server.client();
  const HttpAnswer models = get(*http, "/v1/models");
  ASSERT_EQ(models.status, 200) << models.text;
  ASSERT_EQ(models.body["data"].size(), 2u);
  EXPECT_EQ(models.body["data"][0]["id"], "openjev-4b");
  EXPECT_EQ(models.body["data"][1]["id"], "jev-latest");

  const HttpAnswer by_alias = post(*http, "/v1/decisions", decisions_body("jev-latest").dump());
  ASSERT_EQ(by_alias.status, 200) << by_alias.text;
  EXPECT_EQ(by_alias.body["model"], "openjev-4b");
  const HttpAnswer by_folder =
      post(*http, "/v1/decisions", decisions_body("flide-tiny-random").dump());
  EXPECT_EQ(by_folder.status, 404) << by_folder.text;
  const HttpAnswer systemone = post(*http, "/v1/systemone", systemone_body().dump());
  ASSERT_EQ(systemone.status, 200) << systemone.text;
  EXPECT_EQ(systemone.body["model"], "openjev-4b");
  http.reset();
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();

  for (const char* names : {"a,,b", ",a", "a,b,a"}) {
    const auto [exit_code, out] =
        run_command(std::string(FLIDE_BINARY) + " serve --model " + tiny_model_dir().string() +
                    " --port 0 --served-model-name '" + names + "' 2>&1");
    EXPECT_EQ(exit_code, 2) << out;
    EXPECT_NE(out.find("--served-model-name"), std::string::npos) << out;
  }
}

// --warmup (on by default on cuda, off on cpu) runs synthetic rounds before /health says 200:
// they are not requests, so /metrics counts none of them, and the answers are a cold server's,
// bit for bit.
TEST(ServeStartup, AWarmedUpServerAnswersAsAColdOneAndCountsNoWarmUp) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess warm("--warmup on --round-tokens 3000 --dtype f64");
  ServerProcess cold("--dtype f64");
  ASSERT_GT(warm.port(), 0);
  ASSERT_GT(cold.port(), 0);
  EXPECT_NE(warm.stderr_text().find("warmed up in"), std::string::npos) << warm.stderr_text();
  EXPECT_EQ(cold.stderr_text().find("warmed up"), std::string::npos) << cold.stderr_text();
  auto warm_http = warm.client();
  auto cold_http = cold.client();

  const std::string metrics = get(*warm_http, "/metrics").text;
  EXPECT_NE(metrics.find("flide_tokens_computed_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("flide_round_requests_count 0\n"), std::string::npos) << metrics;

  const HttpAnswer a = post(*warm_http, "/v1/systemone", systemone_body().dump());
  const HttpAnswer b = post(*cold_http, "/v1/systemone", systemone_body().dump());
  ASSERT_EQ(a.status, 200) << a.text;
  ASSERT_EQ(b.status, 200) << b.text;
  EXPECT_EQ(a.body["answers"], b.body["answers"]);

  warm_http.reset();
  cold_http.reset();
  EXPECT_EQ(warm.stop(), 0) << warm.stderr_text();
  EXPECT_EQ(cold.stop(), 0) << cold.stderr_text();
}

// A second server on a taken port is an error, not a silent share of the port (httplib's default
// SO_REUSEPORT would allow that).
TEST(ServeStartup, APortInUseIsAnError) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess first;
  ASSERT_GT(first.port(), 0);
  const auto [exit_code, out] =
      run_command(std::string(FLIDE_BINARY) + " serve --model " + tiny_model_dir().string() +
                  " --port " + std::to_string(first.port()) + " 2>&1");
  EXPECT_EQ(exit_code, 2) << out;
  EXPECT_NE(out.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace flide::test
