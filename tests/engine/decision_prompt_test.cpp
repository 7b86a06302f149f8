// Decision prompts: the OpenJev template rendered byte for byte (decision_api.md §1.4), and the
// token tree's exactness rule (trunk ++ branch == tokenization of the whole prompt, labels are
// one token each) on random states, with the shipped model's tokenizer and the Qwen2 one.
#include "engine/decision_prompt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/decision_calibration.h"

namespace flide {
namespace {

DecisionQuestion choice(std::string instructions, std::vector<DecisionOption> options) {
  return {QuestionType::QuestionType_choice, std::move(instructions), std::move(options)};
}

DecisionQuestion lettered(int n_options) {
  DecisionQuestion q = choice("Pick one.", {});
  for (int i = 0; i < n_options; ++i) q.options.push_back({"option " + std::to_string(i), ""});
  return q;
}

TEST(DecisionPromptTest, OptionLabels) {
  EXPECT_EQ(option_label(0), 'A');
  EXPECT_EQ(option_label(25), 'Z');
  EXPECT_EQ(option_label(26), 'a');
  EXPECT_EQ(option_label(51), 'z');
}

TEST(DecisionPromptTest, WorkedExampleIsByteExact) {
  const std::string state = "I was charged twice for my order last week and nobody has replied.";
  const DecisionQuestion q =
      choice("Which team should handle this?",
             {{"billing", "payments and refunds"}, {"shipping", ""}, {"technical", ""}});
  EXPECT_EQ(render_question_prompt(state, q),
            "<|im_start|>user\n"
            "State:\n"
            "I was charged twice for my order last week and nobody has replied.\n"
            "\n"
            "Question: Which team should handle this?\n"
            "Options:\n"
            "[A] billing: payments and refunds\n"
            "[B] shipping: \n"
            "[C] technical: \n"
            "\n"
            "Answer with the letter of the best option only.<|im_end|>\n"
            "<|im_start|>assistant\n"
            "<think>\n"
            "\n"
            "</think>\n"
            "\n");
}

TEST(DecisionPromptTest, ScoreAppendsTheRatingInstruction) {
  const DecisionQuestion q{QuestionType::QuestionType_score,
                           "How urgent is it?",
                           {{"0", "can wait"}, {"1", "this week"}, {"2", "today"}}};
  EXPECT_EQ(render_question_content("s", q),
            "State:\ns\n\n"
            "Question: How urgent is it? Rate along the ordered levels below (lowest first).\n"
            "Options:\n[A] 0: can wait\n[B] 1: this week\n[C] 2: today\n\n"
            "Answer with the letter of the best option only.");
}

TEST(DecisionPromptTest, NoulFillsEmptyDescriptionsWithTheDefaults) {
  const DecisionQuestion defaults{
      QuestionType::QuestionType_noul, "The customer is angry.", {{"yes", ""}, {"no", ""}}};
  EXPECT_EQ(render_question_content("s", defaults),
            "State:\ns\n\nQuestion: The customer is angry.\nOptions:\n"
            "[A] yes: The statement is true.\n[B] no: The statement is false.\n\n"
            "Answer with the letter of the best option only.");
  const DecisionQuestion given{
      QuestionType::QuestionType_noul, "Angry?", {{"yes", "clearly upset"}, {"no", ""}}};
  EXPECT_NE(render_question_content("s", given)
                .find("[A] yes: clearly upset\n[B] no: The statement is false.\n"),
            std::string::npos);
}

TEST(DecisionPromptTest, ChoiceKeepsEmptyDescriptionsEmpty) {
  const std::string content = render_question_content("s", choice("q", {{"yes", ""}, {"no", ""}}));
  EXPECT_NE(content.find("[A] yes: \n[B] no: \n\n"), std::string::npos);
}

// ---- with a tokenizer ----

class DecisionTreeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::filesystem::path path = GetParam();
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (not generated yet?)";
    // Loading a 150k-token tokenizer.json takes most of a second: once per file.
    static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
    std::unique_ptr<Tokenizer>& slot = loaded[GetParam()];
    if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::load(path));
    tokenizer_ = slot.get();
  }

  // The exactness rule for every branch, and labels that are one token after the prompt.
  void expect_exact(const std::string& state, const std::vector<DecisionQuestion>& questions) {
    const Tree tree = build_decision_tree(*tokenizer_, state, questions);
    ASSERT_EQ(tree.nodes.size(), questions.size() + 1);
    const std::vector<int32_t>& trunk = tree.nodes[0].tokens;
    ASSERT_FALSE(trunk.empty());
    EXPECT_EQ(tree.nodes[0].parent, -1);
    for (size_t i = 0; i < questions.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "question " << i << ", state \"" << state << "\"");
      const TreeNode& child = tree.nodes[i + 1];
      EXPECT_EQ(child.parent, 0);
      EXPECT_EQ(child.readout, ReadoutKind::ReadoutKind_choice);
      ASSERT_FALSE(child.tokens.empty());
      const std::string prompt = render_question_prompt(state, questions[i]);
      std::vector<int32_t> path = trunk;
      path.insert(path.end(), child.tokens.begin(), child.tokens.end());
      ASSERT_EQ(path, tokenizer_->encode(prompt));
      ASSERT_EQ(child.label_ids.size(), questions[i].options.size());
      for (size_t o = 0; o < child.label_ids.size(); ++o) {
        std::vector<int32_t> with_letter = path;
        with_letter.push_back(child.label_ids[o]);
        EXPECT_EQ(with_letter, tokenizer_->encode(prompt + option_label(int(o))));
      }
    }
  }

  const Tokenizer* tokenizer_ = nullptr;
};

std::string random_text(std::mt19937& rng, int words) {
  static const std::vector<std::string> pool = {
      "the", "order", "Refund", "café",       "naïve",  "日本語", "42", "3.14",
      "--",  "!!",    "(a)",    "\"quoted\"", "it's",   "we'll",  "  ", "\t",
      "\n",  "x",     "URL:",   "e-mail",     "émigré", "🙂"};
  std::string out;
  for (int i = 0; i < words; ++i) {
    if (i > 0) out += ' ';
    out += pool[rng() % pool.size()];
  }
  return out;
}

TEST_P(DecisionTreeTest, RandomStatesAndQuestionsAreExact) {
  std::mt19937 rng(1234);
  const std::vector<std::string> endings = {"", ".", "\n", " ", "\n\n", "\n\n\n", "  ", "\t"};
  for (int round = 0; round < 40; ++round) {
    const std::string state =
        random_text(rng, int(rng() % 30)) + endings[size_t(round) % endings.size()];
    std::vector<DecisionQuestion> questions;
    const int n_questions = 1 + int(rng() % 4);
    for (int q = 0; q < n_questions; ++q) {
      DecisionQuestion question = choice(random_text(rng, 1 + int(rng() % 8)), {});
      const int n_options = 1 + int(rng() % 5);
      for (int o = 0; o < n_options; ++o)
        question.options.push_back(
            {random_text(rng, 1 + int(rng() % 3)), rng() % 2 ? "" : random_text(rng, 3)});
      questions.push_back(std::move(question));
    }
    expect_exact(state, questions);
  }
}

// Past 64 KB of prompts the prompts are tokenized on several threads: same trees.
// Long states: the prompts reuse the state's tokenization (Tokenizer::Prefix), or, when NFC
// changes the state (a decomposed accent), encode whole on several threads (> 64 KB in all).
TEST_P(DecisionTreeTest, LongStatesAreExactToo) {
  std::mt19937 rng(99);
  const std::string text = random_text(rng, 5000);
  std::vector<DecisionQuestion> questions;
  for (int q = 0; q < 6; ++q) {
    DecisionQuestion question = choice(random_text(rng, 2 + q), {});
    for (int o = 0; o < 2 + q % 3; ++o) question.options.push_back({random_text(rng, 2), ""});
    questions.push_back(std::move(question));
  }
  for (const std::string& state : {text + "\n", "e\xcc\x81 " + text}) {
    ASSERT_GT(state.size() * questions.size(), size_t(64 * 1024));
    expect_exact(state, questions);
  }
}

TEST_P(DecisionTreeTest, EdgeStates) {
  const std::vector<DecisionQuestion> two = {choice("Which?", {{"a", ""}, {"b", "second"}}),
                                             choice("Why?", {{"x", ""}})};
  for (const std::string state : {"", " ", "\n", "\n\n", "a", "ends in newline\n", "ends in space ",
                                  "ends in two newlines\n\n", "{\"k\": [1, 2]}"}) {
    expect_exact(state, two);
    expect_exact(state, {two[0]});
  }
}

TEST_P(DecisionTreeTest, TrunkStopsAtTheStateWhenQuestionsStartAlike) {
  // Identical questions share every token; the trunk must still end at the state and each
  // branch keep its whole question.
  const std::string state = "A plain state that ends in a full stop.";
  const DecisionQuestion q = choice("Which option is the best one?", {{"a", ""}, {"b", ""}});
  expect_exact(state, {q, q});
  const Tree tree = build_decision_tree(*tokenizer_, state, {q, q});
  const std::vector<int32_t> prefix =
      tokenizer_->encode("<|im_start|>user\nState:\n" + state + "\n\n");
  EXPECT_LE(tree.nodes[0].tokens.size(), prefix.size());
  // Normal case (decision_api.md §1.4): the token split falls exactly after the state's "\n\n".
  EXPECT_EQ(tree.nodes[0].tokens, prefix);
}

TEST_P(DecisionTreeTest, AllFiftyTwoLettersAreDistinctSingleTokens) {
  expect_exact("state", {lettered(kMaxOptions)});
}

TEST_P(DecisionTreeTest, NoulAndScoreQuestions) {
  const DecisionQuestion noul{
      QuestionType::QuestionType_noul, "It is urgent.", {{"yes", ""}, {"no", ""}}};
  const DecisionQuestion score{
      QuestionType::QuestionType_score, "How urgent?", {{"0", "low"}, {"1", "mid"}, {"2", "high"}}};
  expect_exact("The server is down for every customer.", {noul, score});
}

// Each question's readout gets its type's and bucket's temperature; only noul gets the bias,
// on yes (option 0); the tokens are the uncalibrated tree's.
TEST_P(DecisionTreeTest, CalibrationSetsEachReadoutsTemperatureAndNoulBias) {
  const DecisionCalibration calibration =
      DecisionCalibration::from_config(nlohmann::json::parse(R"({"decision_temperature": 2.5,
          "decision_calibration": {"temperature": {"choice": 0.85, "choice.6_10": 0.7,
                                                   "noul": 1.5547},
                                   "noul_bias": -0.25}})"),
                                       "config.json");
  const DecisionQuestion noul{
      QuestionType::QuestionType_noul, "It is urgent.", {{"yes", ""}, {"no", ""}}};
  const DecisionQuestion score{
      QuestionType::QuestionType_score, "How urgent?", {{"0", "low"}, {"1", "mid"}, {"2", "high"}}};
  const std::vector<DecisionQuestion> questions = {lettered(3), lettered(7), noul, score};
  const Tree plain = build_decision_tree(*tokenizer_, "A state.", questions);
  const Tree tree = build_decision_tree(*tokenizer_, "A state.", questions, &calibration);
  ASSERT_EQ(tree.nodes.size(), 5u);
  const double expected_t[] = {0.85, 0.7, 1.5547, 2.5};
  for (size_t q = 0; q < questions.size(); ++q) {
    const TreeNode& node = tree.nodes[q + 1];
    EXPECT_EQ(node.tokens, plain.nodes[q + 1].tokens);
    EXPECT_EQ(node.label_ids, plain.nodes[q + 1].label_ids);
    EXPECT_EQ(node.temperature, expected_t[q]) << "question " << q;
    EXPECT_EQ(plain.nodes[q + 1].temperature, 1.0);
    EXPECT_TRUE(plain.nodes[q + 1].label_bias.empty());
  }
  EXPECT_TRUE(tree.nodes[1].label_bias.empty());
  EXPECT_EQ(tree.nodes[3].label_bias, (std::vector<double>{-0.25, 0.0}));
  EXPECT_TRUE(tree.nodes[4].label_bias.empty());
}

void expect_error(const std::function<void()>& f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no error, expected \"" << message << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST_P(DecisionTreeTest, Errors) {
  const Tokenizer& tok = *tokenizer_;
  expect_error([&] { build_decision_tree(tok, "s", {}); },
               "a decision needs at least one question");
  expect_error(
      [&] {
        build_decision_tree(tok, "s", {lettered(2), lettered(0)});
      },
      "question 1 has no options");
  expect_error([&] { build_decision_tree(tok, "s", {lettered(kMaxOptions + 1)}); },
               "question 0: 53 options, at most 52 are supported");
  const DecisionQuestion noul{QuestionType::QuestionType_noul, "x", {{"yes", ""}}};
  expect_error(
      [&] {
        build_decision_tree(tok, "s", {lettered(2), lettered(3), noul});
      },
      "question 2: a noul question has exactly 2 options (yes, no), got 1");
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, DecisionTreeTest,
    ::testing::Values(std::string(FLIDE_SOURCE_DIR) + "/models/flide-tiny-random/tokenizer.json",
                      std::string(FLIDE_SHARED_DIR) + "/data/tokenizers/qwen2/tokenizer.json"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      return info.param.find("qwen2") != std::string::npos ? "qwen2" : "tiny_random";
    });

}  // namespace
}  // namespace flide
