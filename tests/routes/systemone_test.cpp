// /v1/systemone on well-formed bodies: the translation to OpenJev questions (checked against
// build_decision_tree on the prompts §1.4 prescribes), the response's exact shape (§1.2) from
// synthetic engine results, and the budgets. Malformed bodies: malformed_test.cpp.
#include "server/routes/systemone.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/decision_prompt.h"
#include "route_fixture.h"

namespace flide::server {
namespace {

using test::context;
using test::json;
using test::refusal;
using test::synthetic_result;
using test::systemone_fixture;
using test::tiny_tokenizer;

const char* const kState = "I was charged twice for my order last week and nobody has replied.";

std::vector<std::string> keys(const json& object) {
  std::vector<std::string> out;
  for (const auto& [key, value] : object.items()) out.push_back(key);
  return out;
}

using Keys = std::vector<std::string>;

void expect_same_tree(const Tree& got, const Tree& want) {
  ASSERT_EQ(got.nodes.size(), want.nodes.size());
  for (size_t n = 0; n < got.nodes.size(); ++n) {
    EXPECT_EQ(got.nodes[n].parent, want.nodes[n].parent) << "node " << n;
    EXPECT_EQ(got.nodes[n].tokens, want.nodes[n].tokens) << "node " << n;
    EXPECT_EQ(got.nodes[n].readout, want.nodes[n].readout) << "node " << n;
    EXPECT_EQ(got.nodes[n].label_ids, want.nodes[n].label_ids) << "node " << n;
  }
}

TEST(SystemOneTest, TranslatesToTheOpenJevQuestions) {
  const PreparedRequest prepared = prepare_systemone(systemone_fixture(), context());
  const std::vector<DecisionQuestion> want = {
      {QuestionType::QuestionType_choice,
       "Which team should handle this?",
       {{"billing", "payments and refunds"}, {"shipping", ""}, {"technical", ""}}},
      {QuestionType::QuestionType_score,
       "How urgent is it?",
       {{"0", "can wait"}, {"1", "this week"}, {"2", "today"}, {"3", "right now"}}},
      {QuestionType::QuestionType_noul, "The customer is angry.", {{"yes", ""}, {"no", ""}}}};
  const Tree tree = build_decision_tree(tiny_tokenizer(), kState, want);
  expect_same_tree(prepared.tree, tree);

  int64_t evaluated = 0;
  for (const TreeNode& node : tree.nodes) evaluated += int64_t(node.tokens.size());
  int64_t rendered = 0;
  for (const DecisionQuestion& q : want)
    rendered += int64_t(tiny_tokenizer().encode(render_question_prompt(kState, q)).size());
  EXPECT_EQ(prepared.input_tokens, evaluated);
  EXPECT_EQ(prepared.trunk_tokens, int64_t(tree.nodes[0].tokens.size()));
  EXPECT_EQ(prepared.rendered_tokens, rendered);
  EXPECT_EQ(prepared.rendered_tokens, evaluated + 2 * prepared.trunk_tokens);
  EXPECT_EQ(prepared.n_questions, 3);
}

TEST(SystemOneTest, ResponseShape) {
  const PreparedRequest prepared = prepare_systemone(systemone_fixture(), context());
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const TreeResult result = synthetic_result(prepared.tree, seed);
    const json response = prepared.respond(result);
    EXPECT_EQ(keys(response), Keys({"model", "answers", "usage"}));
    EXPECT_EQ(response["model"], "flide-tiny-random");  // the loaded model, never the alias
    EXPECT_EQ(keys(response["answers"]), Keys({"route", "urgency", "angry"}));
    EXPECT_EQ(keys(response["usage"]), Keys({"input_tokens", "output_tokens"}));
    EXPECT_EQ(response["usage"]["input_tokens"], prepared.input_tokens);
    EXPECT_EQ(response["usage"]["output_tokens"], 0);

    const json& route = response["answers"]["route"];
    EXPECT_EQ(keys(route), Keys({"type", "choice", "probabilities", "confidence"}));
    EXPECT_EQ(route["type"], "choice");
    EXPECT_EQ(keys(route["probabilities"]), Keys({"billing", "shipping", "technical"}));
    double sum = 0.0;
    double best = -1.0;
    std::string best_key;
    for (const auto& [key, p] : route["probabilities"].items()) {
      sum += p.get<double>();
      if (p.get<double>() > best) best = p.get<double>(), best_key = key;
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
    EXPECT_EQ(route["choice"], best_key);
    EXPECT_NEAR(route["confidence"].get<double>(), std::max(0.0, (3.0 * best - 1.0) / 2.0), 1e-6);
    EXPECT_EQ(route["probabilities"]["billing"].get<double>(), result.nodes[1].probs[0]);

    const json& urgency = response["answers"]["urgency"];
    EXPECT_EQ(keys(urgency), Keys({"type", "score", "legend", "probabilities", "confidence"}));
    EXPECT_EQ(urgency["type"], "score");
    EXPECT_EQ(
        urgency["legend"],
        json::parse(R"({"0": "can wait", "1": "this week", "2": "today", "3": "right now"})"));
    EXPECT_EQ(keys(urgency["probabilities"]), Keys({"0", "1", "2", "3"}));
    std::vector<double> p;
    for (const auto& [key, value] : urgency["probabilities"].items())
      p.push_back(value.get<double>());
    double score = 0.0;
    size_t mode = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      score += double(i) * p[i];
      if (p[i] > p[mode]) mode = i;
    }
    EXPECT_NEAR(p[0] + p[1] + p[2] + p[3], 1.0, 1e-6);
    EXPECT_NEAR(urgency["score"].get<double>(), score, 1e-12);
    double spread = 0.0;
    for (size_t i = 0; i < p.size(); ++i) spread += p[i] * std::abs(double(i) - double(mode));
    const double uniform_spread = (1.5 + 0.5 + 0.5 + 1.5) / 4.0;
    EXPECT_NEAR(urgency["confidence"].get<double>(), std::max(0.0, 1.0 - spread / uniform_spread),
                1e-6);

    const json& angry = response["answers"]["angry"];
    EXPECT_EQ(keys(angry), Keys({"type", "noul"}));
    EXPECT_EQ(angry["type"], "noul");
    EXPECT_EQ(angry["noul"].get<double>(), result.nodes[3].probs[0]);  // yes (true) first
  }
}

TEST(SystemOneTest, AnswersFollowRequestOrderAndIdsAreNotShown) {
  json body = systemone_fixture();
  json renamed = json::object();
  const Keys ids = {"question_18_zeta", "question_18_alpha", "question_18_m"};
  size_t i = 0;
  for (const auto& [id, question] : body["questions"].items()) renamed[ids[i++]] = question;
  const PreparedRequest original = prepare_systemone(body, context());
  body["questions"] = renamed;
  const PreparedRequest prepared = prepare_systemone(body, context());
  expect_same_tree(prepared.tree, original.tree);
  const json response = prepared.respond(synthetic_result(prepared.tree, 7));
  EXPECT_EQ(keys(response["answers"]), ids);
}

TEST(SystemOneTest, JsonStateInstructionsAndDescriptionsAreJsonText) {
  const json body = json::parse(R"({
    "state": {"order": 1234, "events": ["charged", "charged again"], "amount": 12.5},
    "questions": {
      "q": {"type": "choice", "instructions": {"question": "Which team?", "note": ["a", 1]},
            "criteria": {"billing": {"handles": "money"}, "shipping": ["boxes", null]}},
      "n": {"type": "noul", "instructions": ["Is", "it", "urgent?"],
            "criteria": {"true": {"when": "today"}, "false": ""}}
    }
  })");
  const PreparedRequest prepared = prepare_systemone(body, context());
  const std::string state =
      R"({"order": 1234, "events": ["charged", "charged again"], "amount": 12.5})";
  const Tree want = build_decision_tree(
      tiny_tokenizer(), state,
      {{QuestionType::QuestionType_choice,
        R"({"question": "Which team?", "note": ["a", 1]})",
        {{"billing", R"({"handles": "money"})"}, {"shipping", R"(["boxes", null])"}}},
       {QuestionType::QuestionType_noul,
        R"(["Is", "it", "urgent?"])",
        {{"yes", R"({"when": "today"})"}, {"no", ""}}}});
  expect_same_tree(prepared.tree, want);

  // The object state and the equivalent string state are one prompt.
  json as_string = body;
  as_string["state"] = state;
  expect_same_tree(prepare_systemone(as_string, context()).tree, want);
}

TEST(SystemOneTest, EmptyNoulDescriptionsTakeTheDefaults) {
  // §1.4's `criteria.true or "The statement is true."`: Python's `or` passes over "", {} and [].
  const DecisionQuestion defaults = {
      QuestionType::QuestionType_noul, "Is it urgent?", {{"yes", ""}, {"no", ""}}};
  const Tree want = build_decision_tree(tiny_tokenizer(), "s", {defaults});
  for (const char* criteria : {R"({"true": {}, "false": []})", R"({"true": "", "false": null})",
                               R"({"false": {}})", "{}", "null"}) {
    const json body = json::parse(std::string(R"({"state": "s", "questions": {"n": {"type":
        "noul", "instructions": "Is it urgent?", "criteria": )") +
                                  criteria + "}}}");
    SCOPED_TRACE(criteria);
    expect_same_tree(prepare_systemone(body, context()).tree, want);
  }
}

TEST(SystemOneTest, OneOptionAndFiftyTwoOptions) {
  json body = json::parse(R"({"state": "s", "questions": {"only": {"type": "choice",
      "instructions": "Pick.", "criteria": {"the one": null}}}})");
  const PreparedRequest one = prepare_systemone(body, context());
  TreeResult result;
  result.nodes.resize(2);
  result.nodes[1].probs = {1.0};
  const json answer = one.respond(result)["answers"]["only"];
  EXPECT_EQ(answer["choice"], "the one");
  EXPECT_EQ(answer["confidence"], 1.0);

  json criteria = json::object();
  for (int i = 0; i < kMaxOptions; ++i) criteria["option " + std::to_string(i)] = nullptr;
  body["questions"]["only"]["criteria"] = criteria;
  const PreparedRequest many = prepare_systemone(body, context());
  EXPECT_EQ(many.tree.nodes[1].label_ids.size(), size_t(kMaxOptions));
}

TEST(SystemOneTest, ModelIsOptionalAndAnyString) {
  for (const char* model : {"", "jev-latest", "jev-preview", "some-router-name"}) {
    json body = systemone_fixture();
    body["model"] = model;
    const PreparedRequest prepared = prepare_systemone(body, context());
    EXPECT_EQ(prepared.respond(synthetic_result(prepared.tree, 1))["model"], "flide-tiny-random");
  }
  json body = systemone_fixture();
  body.erase("model");
  body["videos"] = json::array();
  body["images"] = nullptr;
  body["unknown_field"] = {{"ignored", true}};
  EXPECT_NO_THROW(prepare_systemone(body, context()));
}

TEST(SystemOneTest, TiesGoToTheFirstOption) {
  const PreparedRequest prepared = prepare_systemone(systemone_fixture(), context());
  TreeResult result;
  result.nodes.resize(4);
  result.nodes[1].probs = {0.25, 0.375, 0.375};
  result.nodes[2].probs = {0.1, 0.4, 0.4, 0.1};
  result.nodes[3].probs = {0.5, 0.5};
  const json response = prepared.respond(result);
  EXPECT_EQ(response["answers"]["route"]["choice"], "shipping");
  EXPECT_NEAR(response["answers"]["urgency"]["score"].get<double>(), 1.5, 1e-15);
  // Mode 1 (first of the tie): d = 0.1 + 0.4 + 0.2 = 0.7, d_u = 1.
  EXPECT_NEAR(response["answers"]["urgency"]["confidence"].get<double>(), 0.3, 1e-12);
}

TEST(SystemOneTest, PromptBudgetAdmitsExactlyTheBudget) {
  const int64_t total = prepare_systemone(systemone_fixture(), context()).rendered_tokens;
  RouteLimits limits;
  limits.max_prompt_tokens = total;
  EXPECT_NO_THROW(prepare_systemone(systemone_fixture(), context(limits)));
  limits.max_prompt_tokens = total - 1;
  const auto e = refusal([&] { prepare_systemone(systemone_fixture(), context(limits)); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 413);
  EXPECT_EQ(e->type, "request_too_large_error");
  EXPECT_NE(std::string(e->what()).find("renders " + std::to_string(total) + " prompt tokens"),
            std::string::npos);
}

TEST(SystemOneTest, OneQuestionOverTheContextIs400) {
  const PreparedRequest prepared = prepare_systemone(systemone_fixture(), context());
  const std::vector<int64_t> lengths = path_lengths(prepared.tree);
  const Keys ids = {"route", "urgency", "angry"};
  const size_t longest =
      size_t(std::max_element(lengths.begin() + 1, lengths.end()) - lengths.begin());
  RouteLimits limits;
  limits.max_context_tokens = lengths[longest] - 1;
  const auto e = refusal([&] { prepare_systemone(systemone_fixture(), context(limits)); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->type, "exceed_context_size_error");
  EXPECT_NE(std::string(e->what()).find("questions." + ids[longest - 1] + ": the request (" +
                                        std::to_string(lengths[longest]) + " tokens)"),
            std::string::npos);
  limits.max_context_tokens = lengths[longest];
  EXPECT_NO_THROW(prepare_systemone(systemone_fixture(), context(limits)));
}

TEST(SystemOneTest, ValidImagesAre501OnThisTextOnlyModel) {
  json body = systemone_fixture();
  body["images"] = {"data:image/png;base64,iVBORw0KGgo="};
  const auto e = refusal([&] { prepare_systemone(body, context()); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 501);
  EXPECT_EQ(e->type, "not_supported_error");
}

}  // namespace
}  // namespace flide::server
