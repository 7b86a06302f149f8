// The serving warm-up (see warmup.h).
#include "engine/warmup.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "core/error.h"

namespace flide {

namespace {

constexpr int64_t kContextTokens = 4096;
constexpr int64_t kQuestions = 16;
constexpr int64_t kQuestionTokens = 32;
constexpr int64_t kSmallContextTokens = 256;
constexpr int64_t kSmallQuestions = 4;
constexpr int kLabels = 4;

struct TreeShape {
  int64_t context = 1;  // trunk tokens
  int64_t questions = 1;
  int64_t question_tokens = 1;
};

int64_t rows_of(const TreeShape& s, ExecMode mode) {
  return mode == ExecMode::ExecMode_fork ? s.context + s.questions * s.question_tokens
                                         : s.questions * (s.context + s.question_tokens);
}

// The shape of about `rows` rows with the most questions (at most `questions`) whose context
// keeps at least one token; one question of one token at least.
TreeShape shape_within(int64_t rows, int64_t longest_context, int64_t questions,
                       int64_t question_tokens, ExecMode mode) {
  TreeShape s{1, 1, question_tokens};
  if (mode == ExecMode::ExecMode_fork) {
    s.questions = std::clamp<int64_t>((rows - 1) / question_tokens, 1, questions);
    s.context = rows - s.questions * question_tokens;
  } else {
    s.questions = std::clamp<int64_t>(rows / (1 + question_tokens), 1, questions);
    s.context = rows / s.questions - question_tokens;
  }
  s.context = std::clamp<int64_t>(s.context, 1, longest_context);
  return s;
}

Tree synthetic_tree(const TreeShape& s, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab - 1));
  const auto draw = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = token(rng);
    return ids;
  };
  std::vector<int32_t> labels;
  for (int i = 0; i < kLabels; ++i) labels.push_back(int32_t(i * vocab / kLabels));
  Tree tree;
  tree.nodes.push_back(tree_node(-1, draw(s.context)));
  for (int64_t q = 0; q < s.questions; ++q)
    tree.nodes.push_back(
        tree_node(0, draw(s.question_tokens), ReadoutKind::ReadoutKind_choice, labels));
  return tree;
}

// A question's tokens, and the longest context that leaves room for one, under the shape's
// context limit (below 2 tokens, which no request fits, the warm-up takes 2).
std::pair<int64_t, int64_t> question_and_context(const WarmupShape& shape) {
  const int64_t max_context = shape.max_context > 0 ? std::max<int64_t>(shape.max_context, 2)
                                                    : kContextTokens + kQuestionTokens;
  const int64_t question_tokens = std::min(kQuestionTokens, max_context / 2);
  return {question_tokens, std::min(kContextTokens, max_context - question_tokens)};
}

}  // namespace

std::vector<Tree> warmup_trees(const WarmupShape& shape, ExecMode mode, int64_t rows) {
  FLIDE_CHECK(rows >= 1 && shape.vocab_size >= kLabels);
  const auto [question_tokens, longest_context] = question_and_context(shape);
  const TreeShape largest{longest_context, kQuestions, question_tokens};
  const int64_t n_trees = (rows + rows_of(largest, mode) - 1) / rows_of(largest, mode);
  std::mt19937_64 rng(0x5eed);
  std::vector<Tree> trees;
  for (int64_t t = 0; t < n_trees; ++t) {
    const int64_t share = rows / n_trees + (t < rows % n_trees ? 1 : 0);
    const TreeShape tree_shape = shape_within(std::max<int64_t>(share, 1), longest_context,
                                              kQuestions, question_tokens, mode);
    trees.push_back(synthetic_tree(tree_shape, shape.vocab_size, rng));
  }
  return trees;
}

WarmupReport warm_up(Model& model, const RoundPolicy& policy, ExecMode mode,
                     const WarmupShape& shape) {
  const auto start = std::chrono::steady_clock::now();
  RoundPolicy one_round = policy;
  one_round.max_round_tokens = 0;  // the full round's trees run together, as one round
  Executor executor(model, one_round);
  WarmupReport report;
  RunStats stats;
  executor.run(warmup_trees(shape, mode, shape.round_tokens), mode, &stats);
  report.full_round_rows = stats.tokens_computed;

  const auto [question_tokens, longest_context] = question_and_context(shape);
  const TreeShape small{std::min(kSmallContextTokens, longest_context), kSmallQuestions,
                        question_tokens};
  std::mt19937_64 rng(0x5eed + 1);
  const std::vector<Tree> small_round{synthetic_tree(small, shape.vocab_size, rng)};
  for (int i = 0; i < 2; ++i) {
    RunStats small_stats;
    executor.run(small_round, mode, &small_stats);
    report.small_round_rows = small_stats.tokens_computed;
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace flide
