// Jev's confidence formulas against the published rows (decision_api.md §1.3), and the answer
// arithmetic's edge cases: one option, ties, uniform distributions.
#include "server/routes/answers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace flide::server {
namespace {

std::vector<double> top_and_rest(size_t n, double top) {
  std::vector<double> p(n, (1.0 - top) / double(n - 1));
  p[0] = top;
  return p;
}

TEST(AnswersTest, ChoiceConfidencePublishedRows) {
  // TypeSafe publishes 2-decimal values computed from unrounded probabilities: 0.006 covers
  // both roundings (5 options at 0.74 gives 0.675, shown as 0.67).
  EXPECT_NEAR(choice_confidence(top_and_rest(3, 0.61)), 0.42, 0.006);
  EXPECT_NEAR(choice_confidence(top_and_rest(4, 0.40)), 0.20, 0.006);
  EXPECT_NEAR(choice_confidence(top_and_rest(5, 0.74)), 0.67, 0.006);
  EXPECT_NEAR(choice_confidence(top_and_rest(3, 0.84)), 0.76, 0.006);
  EXPECT_NEAR(choice_confidence(top_and_rest(3, 0.88)), 0.82, 1e-12);
}

TEST(AnswersTest, ChoiceConfidenceEdges) {
  EXPECT_EQ(choice_confidence({1.0}), 1.0);
  EXPECT_NEAR(choice_confidence({0.25, 0.25, 0.25, 0.25}), 0.0, 1e-15);
  EXPECT_EQ(choice_confidence({0.5, 0.5}), 0.0);
  for (size_t n = 2; n <= 8; ++n) {  // monotonic in p_max
    double previous = -1.0;
    for (double top = 1.0 / double(n); top <= 1.0; top += 0.01) {
      const double c = choice_confidence(top_and_rest(n, top));
      EXPECT_GE(c, previous);
      EXPECT_GE(c, 0.0);
      EXPECT_LE(c, 1.0 + 1e-12);
      previous = c;
    }
  }
}

TEST(AnswersTest, ScoreConfidencePublishedRows) {
  EXPECT_NEAR(score_confidence({0.95, 0.05}), 0.90, 1e-12);
  EXPECT_NEAR(score_confidence({0.0, 0.57, 0.43}), 0.35, 0.006);
  EXPECT_NEAR(score_confidence({0.0, 0.74, 0.26}), 0.61, 0.006);
  EXPECT_NEAR(score_confidence({0.0, 0.91, 0.09}), 0.87, 0.006);
  EXPECT_NEAR(score_confidence({0.0, 0.48, 0.52, 0.0}), 0.52, 1e-12);
  // The spec lists 0.89 for this row; the formula gives 1 - 0.14 / 1.2 = 0.8833.
  EXPECT_NEAR(score_confidence({0.0, 0.0, 0.86, 0.14, 0.0}), 1.0 - 0.14 / 1.2, 1e-12);
}

TEST(AnswersTest, ScoreAndChoiceFormulasAgreeOnTwoLevels) {
  for (double p = 0.0; p <= 1.0; p += 0.05)
    EXPECT_NEAR(score_confidence({p, 1.0 - p}), choice_confidence({p, 1.0 - p}), 1e-12);
}

TEST(AnswersTest, ScoreEdges) {
  EXPECT_EQ(score_confidence({1.0}), 1.0);
  EXPECT_NEAR(score_confidence({0.2, 0.2, 0.2, 0.2, 0.2}), 0.0, 1e-12);
  EXPECT_EQ(score_confidence({0.5, 0.0, 0.0, 0.5}), 0.0);  // floored at 0
  EXPECT_NEAR(expected_level({0.1, 0.2, 0.3, 0.4}), 0.2 + 0.6 + 1.2, 1e-15);
  EXPECT_EQ(expected_level({1.0, 0.0, 0.0}), 0.0);
  EXPECT_EQ(expected_level({0.0, 0.0, 1.0}), 2.0);
}

TEST(AnswersTest, ArgmaxTakesTheFirstOfTies) {
  EXPECT_EQ(argmax({0.4, 0.4, 0.2}), 0u);
  EXPECT_EQ(argmax({0.2, 0.4, 0.4}), 1u);
  EXPECT_EQ(argmax({1.0}), 0u);
}

TEST(AnswersTest, QuestionProbsChecksTheResultShape) {
  TreeResult result;
  result.nodes.resize(3);
  result.nodes[2].probs = {0.5, 0.5};
  EXPECT_EQ(question_probs(result, 1, 2), result.nodes[2].probs);
  EXPECT_THROW(question_probs(result, 1, 3), Error);
  EXPECT_THROW(question_probs(result, 2, 2), Error);
}

// A NaN or infinite probability fails the question, naming it, instead of reaching JSON as null.
TEST(AnswersTest, QuestionProbsRefusesNonFiniteProbabilities) {
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    TreeResult result;
    result.nodes.resize(3);
    result.nodes[1].probs = {0.25, 0.75};
    result.nodes[2].probs = {bad, 0.5};
    EXPECT_EQ(question_probs(result, 0, 2), result.nodes[1].probs);
    try {
      question_probs(result, 1, 2);
      ADD_FAILURE() << "no error for probability " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("question 1: the model's probabilities are not finite"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace flide::server
