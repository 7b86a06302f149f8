// The OpenJev decision template (decision_api.md §1.4) and the token tree built from it.
// Exactness rule: every branch's trunk ++ child tokens is the tokenization of that question's
// whole prompt, byte for byte, so forked execution equals running each prompt on its own. (The
// prompts share the state's tokenization through Tokenizer::Prefix, which returns exactly the
// whole prompt's ids.)
// The trunk is the longest common token prefix of all prompts and of the rendered state prefix
// ("<|im_start|>user\nState:\n" + state + "\n\n"). Including the state prefix keeps the trunk a
// property of the state alone (question texts that happen to start alike stay in the branches),
// so requests sharing a state fork at the same token and hit the same state-cache checkpoint.
#include "engine/decision_prompt.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "engine/decision_calibration.h"

namespace flide {

namespace {

constexpr const char* kScoreSuffix = " Rate along the ordered levels below (lowest first).";
constexpr const char* kAnswerCue = "\n\nAnswer with the letter of the best option only.";
// noul options are ordered true first; an empty description falls back to the template's text
// (the helper's `criteria.true or "..."`, so "" counts as absent too).
constexpr const char* kNoulDefault[2] = {"The statement is true.", "The statement is false."};

std::string state_prefix(const std::string& state_text) {
  return "<|im_start|>user\nState:\n" + state_text + "\n\n";
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return size_t(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

void validate_question(size_t index, const DecisionQuestion& q) {
  const size_t n = q.options.size();
  if (n == 0) throw Error(cat("question ", index, " has no options"));
  if (n > size_t(kMaxOptions))
    throw Error(
        cat("question ", index, ": ", n, " options, at most ", kMaxOptions, " are supported"));
  if (q.type == QuestionType::QuestionType_noul && n != 2)
    throw Error(
        cat("question ", index, ": a noul question has exactly 2 options (yes, no), got ", n));
}

// Label ids of one prompt: each letter must add exactly one token to the prompt's tokenization
// (checked on the whole prompt, the only check that is right for BPE; decision_api.md §1.3).
// encode_appended makes that cheap: the prompt ends in an added token plus "\n\n".
std::vector<int32_t> label_ids(const Tokenizer& tokenizer, size_t index, const std::string& prompt,
                               size_t n_options) {
  std::vector<std::string> letters;
  for (size_t i = 0; i < n_options; ++i) letters.emplace_back(1, option_label(int(i)));
  const auto appended = tokenizer.encode_appended(prompt, letters);
  std::vector<int32_t> ids;
  std::unordered_set<int32_t> seen;
  for (size_t i = 0; i < n_options; ++i) {
    const char letter = letters[i][0];
    const std::optional<std::vector<int32_t>>& added = appended[i];
    if (!added || added->size() != 1)
      throw Error(cat("question ", index, ": option letter '", letter,
                      "' is not a single token when appended to the prompt"));
    if (!seen.insert(added->front()).second)
      throw Error(cat("question ", index, ": option letter '", letter,
                      "' has the same token id as an earlier letter"));
    ids.push_back(added->front());
  }
  return ids;
}

// Prompts with at least this many bytes in all left to tokenize after the state's reusable part
// (Tokenizer::Prefix) are tokenized, and their labels checked, on several threads; below it,
// thread start-up costs more than it saves. In a QuALITY-sized request that part is nearly all
// of every prompt's ~25 KB (the request prepares in ~1.7 ms on one core), unless NFC changes the
// state or the tokenizer is not of the Qwen kind: then ~19 whole encodes, ~0.6 ms each.
constexpr size_t kParallelBytes = 64 * 1024;

// task(i) for every i < n on up to `threads` threads, this one included; afterwards rethrows
// the exception of the lowest failing i, the one a sequential loop would have thrown.
void run_tasks(size_t n, size_t threads, const std::function<void(size_t)>& task) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        task(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < std::min(threads, n); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace

const char* question_type_name(QuestionType type) {
  switch (type) {
    case QuestionType::QuestionType_choice:
      return "choice";
    case QuestionType::QuestionType_score:
      return "score";
    case QuestionType::QuestionType_noul:
      return "noul";
  }
  return "";
}

char option_label(int index) {
  FLIDE_CHECK(index >= 0 && index < kMaxOptions, "option index ", index);
  return index < 26 ? char('A' + index) : char('a' + (index - 26));
}

std::string render_question_content(const std::string& state_text, const DecisionQuestion& q) {
  std::string out = "State:\n" + state_text + "\n\nQuestion: " + q.instructions;
  if (q.type == QuestionType::QuestionType_score) out += kScoreSuffix;
  out += "\nOptions:\n";
  for (size_t i = 0; i < q.options.size(); ++i) {
    const DecisionOption& option = q.options[i];
    std::string description = option.description;
    if (q.type == QuestionType::QuestionType_noul && description.empty() && i < 2)
      description = kNoulDefault[i];
    if (i > 0) out += '\n';
    out += cat('[', option_label(int(i)), "] ", option.key, ": ", description);
  }
  out += kAnswerCue;
  return out;
}

std::string render_question_prompt(const std::string& state_text, const DecisionQuestion& q) {
  return "<|im_start|>user\n" + render_question_content(state_text, q) +
         "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
}

Tree build_decision_tree(const Tokenizer& tokenizer, const std::string& state_text,
                         const std::vector<DecisionQuestion>& questions,
                         const DecisionCalibration* calibration) {
  if (questions.empty()) throw Error("a decision needs at least one question");
  for (size_t i = 0; i < questions.size(); ++i) validate_question(i, questions[i]);

  // Every prompt, then the state prefix (the last text), which every prompt starts with: each
  // encode is whole by definition (encode(text, prefix) == encode(text)), but tokenizes only
  // what follows the state prefix's reusable part.
  std::vector<std::string> texts;
  for (const DecisionQuestion& q : questions)
    texts.push_back(render_question_prompt(state_text, q));
  texts.push_back(state_prefix(state_text));
  const Tokenizer::Prefix prefix = tokenizer.prefix(texts.back());
  size_t left = 0;
  for (const std::string& text : texts) left += text.size() - prefix.shared_bytes();
  const size_t threads =
      left >= kParallelBytes ? std::max(1u, std::thread::hardware_concurrency()) : 1;
  std::vector<std::vector<int32_t>> tokens(texts.size());
  run_tasks(texts.size(), threads,
            [&](size_t i) { tokens[i] = tokenizer.encode(texts[i], prefix); });
  const std::vector<int32_t> prefix_tokens = std::move(tokens.back());
  tokens.pop_back();

  size_t trunk = common_prefix(tokens[0], prefix_tokens);
  for (const std::vector<int32_t>& t : tokens)  // every branch keeps >= 1 token of its own
    trunk = std::min({trunk, common_prefix(tokens[0], t), t.size() - 1});
  // Every prompt starts with the same text, so only a pathological tokenizer gets here; refuse
  // it as a request error instead of forming an empty trunk.
  if (trunk == 0) throw Error("the question prompts share no leading token to form a trunk");

  Tree tree;
  tree.nodes.resize(questions.size() + 1);
  tree.nodes[0].tokens.assign(tokens[0].begin(), tokens[0].begin() + trunk);
  run_tasks(questions.size(), threads, [&](size_t i) {
    TreeNode& child = tree.nodes[i + 1];
    child.parent = 0;
    child.tokens.assign(tokens[i].begin() + trunk, tokens[i].end());
    child.readout = ReadoutKind::ReadoutKind_choice;
    child.label_ids = label_ids(tokenizer, i, texts[i], questions[i].options.size());
    if (!calibration) return;
    const DecisionQuestion& q = questions[i];
    child.temperature = calibration->temperature(q.type, q.options.size());
    if (q.type == QuestionType::QuestionType_noul && calibration->noul_bias() != 0.0)
      child.label_bias = {calibration->noul_bias(), 0.0};  // yes is option 0
  });
  return tree;
}

}  // namespace flide
