// /v1/decisions on well-formed bodies: the translation to OpenJev questions (§2.4), the
// response's exact shape (§2.2, the openai 7.55.0 Decision type) from synthetic engine results,
// and the input renderings (string, user messages, trajectories). Malformed bodies:
// malformed_test.cpp.
#include "server/routes/decisions.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/decision_prompt.h"
#include "route_fixture.h"

namespace flide::server {
namespace {

using test::context;
using test::decisions_fixture;
using test::json;
using test::refusal;
using test::synthetic_result;
using test::tiny_tokenizer;

using Keys = std::vector<std::string>;

Keys keys(const json& object) {
  Keys out;
  for (const auto& [key, value] : object.items()) out.push_back(key);
  return out;
}

void expect_same_tree(const Tree& got, const Tree& want) {
  ASSERT_EQ(got.nodes.size(), want.nodes.size());
  for (size_t n = 0; n < got.nodes.size(); ++n) {
    EXPECT_EQ(got.nodes[n].tokens, want.nodes[n].tokens) << "node " << n;
    EXPECT_EQ(got.nodes[n].label_ids, want.nodes[n].label_ids) << "node " << n;
  }
}

const std::vector<DecisionQuestion> kFixtureQuestions = {
    {QuestionType::QuestionType_noul, "The item is damaged.", {{"yes", ""}, {"no", ""}}},
    {QuestionType::QuestionType_choice,
     "Which team handles it?",
     {{"returns", "refunds and exchanges"}, {"true", ""}, {"true", "the string"}}},
    {QuestionType::QuestionType_score,
     "How severe is it?",
     {{"0", "cosmetic"}, {"1", "broken: unusable"}}}};

TEST(DecisionsTest, TranslatesToTheOpenJevQuestions) {
  const PreparedRequest prepared = prepare_decisions(decisions_fixture(), context());
  expect_same_tree(prepared.tree, build_decision_tree(tiny_tokenizer(),
                                                      "The parcel arrived with a cracked screen.",
                                                      kFixtureQuestions));
  EXPECT_EQ(prepared.n_questions, 3);
}

TEST(DecisionsTest, ResponseShape) {
  const PreparedRequest prepared = prepare_decisions(decisions_fixture(), context());
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const TreeResult result = synthetic_result(prepared.tree, seed);
    const json response = prepared.respond(result);
    EXPECT_EQ(keys(response), Keys({"model", "answers", "usage"}));
    EXPECT_EQ(response["model"], "flide-tiny-random");
    ASSERT_TRUE(response["answers"].is_array());
    ASSERT_EQ(response["answers"].size(), 3u);

    const json& predicate = response["answers"][0];
    EXPECT_EQ(keys(predicate), Keys({"type", "name", "probability"}));
    EXPECT_EQ(predicate["type"], "predicate");
    EXPECT_EQ(predicate["name"], "damaged");
    EXPECT_EQ(predicate["probability"].get<double>(), result.nodes[1].probs[0]);  // P(true)

    const json& choice = response["answers"][1];
    EXPECT_EQ(keys(choice), Keys({"type", "name", "choice", "probabilities", "confidence"}));
    EXPECT_EQ(choice["name"], "department");
    ASSERT_EQ(choice["probabilities"].size(), 3u);
    const json values = json::parse(R"(["returns", true, "true"])");
    double sum = 0.0;
    size_t best = 0;
    for (size_t i = 0; i < 3; ++i) {
      const json& entry = choice["probabilities"][i];
      EXPECT_EQ(keys(entry), Keys({"value", "probability"}));
      EXPECT_EQ(entry["value"], values[i]);  // typed: true stays a boolean, "true" a string
      EXPECT_EQ(entry["value"].type(), values[i].type());
      sum += entry["probability"].get<double>();
      if (entry["probability"] > choice["probabilities"][best]["probability"]) best = i;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
    EXPECT_EQ(choice["choice"], values[best]);
    EXPECT_EQ(choice["choice"].type(), values[best].type());
    const double p_max = choice["probabilities"][best]["probability"].get<double>();
    EXPECT_NEAR(choice["confidence"].get<double>(), std::max(0.0, (3.0 * p_max - 1.0) / 2.0), 1e-6);

    const json& score = response["answers"][2];
    EXPECT_EQ(keys(score), Keys({"type", "name", "score", "probabilities", "confidence"}));
    EXPECT_TRUE(score["name"].is_null());  // present, null for an unnamed question
    ASSERT_EQ(score["probabilities"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(keys(score["probabilities"][i]), Keys({"value", "label", "probability"}));
      EXPECT_EQ(score["probabilities"][i]["value"], i);
      EXPECT_TRUE(score["probabilities"][i]["value"].is_number_integer());
    }
    EXPECT_EQ(score["probabilities"][0]["label"], "cosmetic");
    EXPECT_EQ(score["probabilities"][1]["label"], "broken");
    const double p1 = score["probabilities"][1]["probability"].get<double>();
    const double p0 = score["probabilities"][0]["probability"].get<double>();
    EXPECT_NEAR(p0 + p1, 1.0, 1e-6);
    EXPECT_NEAR(score["score"].get<double>(), p1, 1e-12);
    // Two levels: the score formula equals the choice formula, |p0 - p1|.
    EXPECT_NEAR(score["confidence"].get<double>(), std::abs(p0 - p1), 1e-6);

    const json& usage = response["usage"];
    EXPECT_EQ(keys(usage), Keys({"input_tokens", "input_tokens_details", "output_tokens",
                                 "output_tokens_details", "total_tokens"}));
    EXPECT_EQ(keys(usage["input_tokens_details"]), Keys({"cached_tokens", "cache_write_tokens"}));
    EXPECT_EQ(keys(usage["output_tokens_details"]), Keys({"reasoning_tokens"}));
    EXPECT_EQ(usage["input_tokens"], prepared.rendered_tokens);
    EXPECT_EQ(usage["input_tokens_details"]["cached_tokens"], 2 * prepared.trunk_tokens);
    EXPECT_EQ(usage["input_tokens_details"]["cache_write_tokens"], 0);
    EXPECT_EQ(usage["output_tokens"], 0);
    EXPECT_EQ(usage["output_tokens_details"]["reasoning_tokens"], 0);
    EXPECT_EQ(usage["total_tokens"], prepared.rendered_tokens);
  }
  EXPECT_EQ(prepared.rendered_tokens - prepared.input_tokens, 2 * prepared.trunk_tokens);
}

TEST(DecisionsTest, UserMessagesAreJoinedByABlankLine) {
  json body = decisions_fixture();
  body["input"] = json::parse(R"([
    {"role": "user", "content": "First message."},
    {"type": "message", "role": "user", "content": [
      {"type": "input_text", "text": "Second,", "prompt_cache_breakpoint": {"mode": "explicit"}},
      {"type": "input_json", "data": {"order": 7, "items": ["screen"]}}]}
  ])");
  expect_same_tree(
      prepare_decisions(body, context()).tree,
      build_decision_tree(tiny_tokenizer(),
                          "First message.\n\nSecond,\n\n{\"order\": 7, \"items\": [\"screen\"]}",
                          kFixtureQuestions));
}

TEST(DecisionsTest, TrajectoriesAreJsonTextWithoutCacheMarkers) {
  json body = decisions_fixture();
  body["input"] = json::parse(R"([
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": [{"type": "input_text", "text": "Refund me.",
                                  "prompt_cache_breakpoint": {"mode": "explicit"}}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"id\": 7}"},
    {"type": "function_call_output", "call_id": "c1", "output": "order 7: shipped"},
    {"role": "assistant", "phase": "final_answer",
     "content": [{"type": "output_text", "text": "Done."}]}
  ])");
  const std::string want =
      R"([{"role": "system", "content": "You are a support agent."}, )"
      R"({"role": "user", "content": [{"type": "input_text", "text": "Refund me."}]}, )"
      R"({"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"id\": 7}"}, )"
      R"({"type": "function_call_output", "call_id": "c1", "output": "order 7: shipped"}, )"
      R"({"role": "assistant", "phase": "final_answer", )"
      R"("content": [{"type": "output_text", "text": "Done."}]}])";
  expect_same_tree(prepare_decisions(body, context()).tree,
                   build_decision_tree(tiny_tokenizer(), want, kFixtureQuestions));
}

TEST(DecisionsTest, InstructionPartsAreJoinedByABlankLine) {
  json body = decisions_fixture();
  body["questions"] = json::parse(R"([{"type": "predicate", "instructions": [
      {"type": "input_text", "text": "The order matches:"},
      {"type": "input_json", "data": [{"id": 7}]}]}])");
  expect_same_tree(
      prepare_decisions(body, context()).tree,
      build_decision_tree(tiny_tokenizer(), "The parcel arrived with a cracked screen.",
                          {{QuestionType::QuestionType_noul,
                            "The order matches:\n\n[{\"id\": 7}]",
                            {{"yes", ""}, {"no", ""}}}}));
}

TEST(DecisionsTest, JsonDataOfThirtyTwoLevelsIsAccepted) {
  json data = json::object();
  for (int i = 0; i < 31; ++i) data = {{"a", data}};  // the innermost {} is level 32
  json body = decisions_fixture();
  body["input"] = json::array(
      {{{"role", "user"}, {"content", json::array({{{"type", "input_json"}, {"data", data}}})}}});
  EXPECT_NO_THROW(prepare_decisions(body, context()));
}

TEST(DecisionsTest, OptionalFieldsAreAccepted) {
  json body = decisions_fixture();
  body["prompt_cache_key"] = "tenant-1";
  body["prompt_cache_options"] = {{"mode", "explicit"}, {"ttl", "30m"}};
  body["safety_identifier"] = std::string(128, 'u');
  EXPECT_NO_THROW(prepare_decisions(body, context()));
  body["prompt_cache_key"] = nullptr;
  body["prompt_cache_options"] = nullptr;
  body["safety_identifier"] = nullptr;
  EXPECT_NO_THROW(prepare_decisions(body, context()));
}

TEST(DecisionsTest, AnotherModelIs404) {
  json body = decisions_fixture();
  body["model"] = "gpt-6-luna";
  const auto e = refusal([&] { prepare_decisions(body, context()); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  EXPECT_EQ(e->type, "not_found_error");
  EXPECT_EQ(e->param, "model");
}

// flide serve --served-model-name a,b: either name is served, the first is reported, and an
// unknown name's 404 lists them all.
TEST(DecisionsTest, AnyServedNameIsAcceptedAndTheFirstReported) {
  RouteContext ctx = context();
  ctx.model_id = "openjev-4b";
  ctx.model_aliases = {"jev-latest", "databricks/openjev-4b"};
  json body = decisions_fixture();
  for (const char* name : {"openjev-4b", "jev-latest", "databricks/openjev-4b"}) {
    body["model"] = name;
    const PreparedRequest prepared = prepare_decisions(body, ctx);
    EXPECT_EQ(prepared.respond(synthetic_result(prepared.tree, 1))["model"], "openjev-4b");
  }
  body["model"] = "flide-tiny-random";
  const auto e = refusal([&] { prepare_decisions(body, ctx); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 404);
  EXPECT_NE(std::string(e->what()).find(R"("openjev-4b", "jev-latest", "databricks/openjev-4b")"),
            std::string::npos)
      << e->what();
}

TEST(DecisionsTest, FourHundredQuestionsAreAdmittedByDefault) {
  // The openai package types 1-400 questions, and a request it makes must be answered: the
  // default --max-questions refuses none of them. A lower operator limit is a 413.
  json body = decisions_fixture();
  const json question = body["questions"][0];
  body["questions"] = json::array();
  for (int i = 0; i < 400; ++i) body["questions"].push_back(question);
  EXPECT_EQ(prepare_decisions(body, context()).tree.nodes.size(), 401u);

  RouteLimits limits;
  limits.max_questions = 64;
  const auto e = refusal([&] { prepare_decisions(body, context(limits)); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 413);
  EXPECT_NE(std::string(e->what()).find("the maximum is 64"), std::string::npos) << e->what();
}

TEST(DecisionsTest, FiftyTwoChoicesAreSupported) {
  json body = decisions_fixture();
  json choices = json::array();
  for (int i = 0; i < kMaxOptions; ++i) choices.push_back({{"value", cat("c", i)}});
  body["questions"][1]["choices"] = choices;
  EXPECT_EQ(prepare_decisions(body, context()).tree.nodes[2].label_ids.size(), size_t(kMaxOptions));
}

}  // namespace
}  // namespace flide::server
