// The routes' shared tail: errors from build_decision_tree become refusals in the route's style
// (never another exception), and the token counts usage is built from.
#include "server/routes/question_tree.h"

#include <gtest/gtest.h>

#include "route_fixture.h"

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

}  // namespace
}  // namespace flide::server
