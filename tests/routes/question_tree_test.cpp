// The routes' shared tail: errors from build_decision_tree become refusals in the route's style
// (never another exception), the token counts usage is built from, and the served calibration
// on every question of both routes.
#include "server/routes/question_tree.h"

#include <gtest/gtest.h>

#include "route_fixture.h"
#include "server/routes/decisions.h"
#include "server/routes/systemone.h"

namespace flide::server {
namespace {

using test::context;
using test::refusal;

TEST(QuestionTreeTest, TreeBuildErrorsAreRefusals) {
  const DecisionQuestion empty{QuestionType::QuestionType_choice, "Pick.", {}};
  const auto s1 = refusal(
      [&] { prepare_tree(context(), Route::Route_systemone, "s", {empty}, {"questions.q"}); });
  ASSERT_TRUE(s1);
  EXPECT_EQ(s1->status, 422);
  EXPECT_EQ(std::string(s1->what()), "questions: question 0 has no options");
  const auto oa = refusal(
      [&] { prepare_tree(context(), Route::Route_decisions, "s", {empty}, {"questions[0]"}); });
  ASSERT_TRUE(oa);
  EXPECT_EQ(oa->status, 400);
  EXPECT_EQ(oa->param, "questions");
}

TEST(QuestionTreeTest, TokenCounts) {
  const DecisionQuestion q{QuestionType::QuestionType_noul, "Is it?", {{"yes", ""}, {"no", ""}}};
  const PreparedRequest p = prepare_tree(context(), Route::Route_systemone, "A state.", {q, q, q},
                                         {"questions.a", "questions.b", "questions.c"});
  const int64_t child = int64_t(p.tree.nodes[1].tokens.size());
  EXPECT_EQ(p.trunk_tokens, int64_t(p.tree.nodes[0].tokens.size()));
  EXPECT_EQ(p.input_tokens, p.trunk_tokens + 3 * child);       // the trunk once
  EXPECT_EQ(p.rendered_tokens, 3 * (p.trunk_tokens + child));  // every prompt in full
  EXPECT_EQ(p.n_questions, 3);
  EXPECT_FALSE(p.respond);  // the route adds it
}

// A predicate of /v1/decisions is a noul question: it takes noul's temperature and bias.
TEST(QuestionTreeTest, BothRoutesTakeTheServedCalibration) {
  RouteContext ctx = context();
  ctx.calibration =
      DecisionCalibration::from_config(nlohmann::json::parse(R"({"decision_calibration": {
          "temperature": {"choice": 0.5, "score": 2, "noul": 1.5}, "noul_bias": 0.3}})"),
                                       "config.json");
  const PreparedRequest s1 = prepare_systemone(test::systemone_fixture(), ctx);
  const PreparedRequest oa = prepare_decisions(test::decisions_fixture(), ctx);
  struct Expected {
    double temperature;
    std::vector<double> bias;
  };
  const auto check = [](const Tree& tree, const std::vector<Expected>& expected) {
    ASSERT_EQ(tree.nodes.size(), expected.size() + 1);
    for (size_t q = 0; q < expected.size(); ++q) {
      EXPECT_EQ(tree.nodes[q + 1].temperature, expected[q].temperature) << "question " << q;
      EXPECT_EQ(tree.nodes[q + 1].label_bias, expected[q].bias) << "question " << q;
    }
  };
  check(s1.tree, {{0.5, {}}, {2.0, {}}, {1.5, {0.3, 0.0}}});  // route, urgency, angry
  check(oa.tree, {{1.5, {0.3, 0.0}}, {0.5, {}}, {2.0, {}}});  // damaged, department, severity
}

}  // namespace
}  // namespace flide::server
