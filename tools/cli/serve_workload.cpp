// `flide bench-serve` requests (see serve_workload.h).
#include "serve_workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "cli_common.h"
#include "core/error.h"
#include "decide_request.h"

namespace flide::cli {

namespace {

using json = nlohmann::ordered_json;

// The OpenJev template's own tokens in a question with Qwen's tokenizer: about 25 (the
// "Question:" and "Options:" lines, the answer cue, the chat markers) plus 7 per option line
// ("[A] option 1: "). A synthetic question's instructions get what is left of its size.
constexpr int64_t kQuestionOverheadTokens = 25;
constexpr int64_t kOptionOverheadTokens = 7;

int64_t words_for(int64_t tokens, double tokens_per_word) {
  return std::max<int64_t>(1, std::llround(double(tokens) / tokens_per_word));
}

std::vector<TextRequest> synthetic_requests(const SyntheticShape& shape, double tokens_per_word,
                                            uint64_t seed) {
  const int64_t option_tokens = shape.labels * kOptionOverheadTokens;
  const int64_t instruction_tokens =
      std::max<int64_t>(4, shape.question_tokens - kQuestionOverheadTokens - option_tokens);
  TextRequest request;
  request.state = pseudo_text(words_for(shape.trunk_tokens, tokens_per_word), seed);
  for (int32_t q = 0; q < shape.questions; ++q) {
    TextQuestion question;
    question.instructions =
        pseudo_text(words_for(instruction_tokens, tokens_per_word), seed + 1 + uint64_t(q)) + "?";
    for (int32_t o = 0; o < shape.labels; ++o) question.options.push_back(cat("option ", o + 1));
    request.questions.push_back(std::move(question));
  }
  return {request};
}

std::vector<TextRequest> file_requests(const std::filesystem::path& file) {
  const std::string text = read_file(file);
  std::vector<TextRequest> requests;
  for (const auto& [number, line] : nonblank_lines(text)) {
    const auto where = [&] { return cat("--workload ", file.string(), ": line ", number, ": "); };
    DecideRequest parsed;
    try {
      parsed = parse_decide_request(json::parse(line), INT64_MAX);
    } catch (const std::exception& e) {
      throw Error(where() + e.what());
    }
    if (!parsed.is_text)
      throw Error(where() + "a token-id request; an HTTP server takes text requests");
    TextRequest request;
    request.state = parsed.context;
    for (const DecisionQuestion& prompt : parsed.prompts) {
      TextQuestion question{prompt.instructions, {}};
      std::set<std::string> seen;
      for (const DecisionOption& option : prompt.options) {
        if (!seen.insert(option.key).second)
          throw Error(where() + cat("option \"", option.key,
                                    "\" appears twice in a question (System One keys options by "
                                    "their text)"));
        question.options.push_back(option.key);
      }
      request.questions.push_back(std::move(question));
    }
    requests.push_back(std::move(request));
  }
  if (requests.empty()) throw Error(cat("--workload ", file.string(), ": no request"));
  return requests;
}

}  // namespace

std::string pseudo_text(int64_t words, uint64_t seed) {
  static constexpr const char* kSyllables[] = {"ka", "lo", "mi", "ne", "ru", "sa", "te", "vo",
                                               "di", "pa", "zu", "fe", "go", "hi", "ju", "ba"};
  std::mt19937_64 rng(seed);
  std::string text;
  for (int64_t w = 0; w < words; ++w) {
    if (w > 0) text += (w % 12 == 0) ? ". " : " ";
    const int syllables = 1 + int(rng() % 3);
    for (int s = 0; s < syllables; ++s) text += kSyllables[rng() % std::size(kSyllables)];
  }
  return text + ".";
}

std::vector<TextRequest> serve_requests(const WorkloadSpec& spec, double tokens_per_word,
                                        uint64_t seed) {
  return spec.synthetic ? synthetic_requests(*spec.synthetic, tokens_per_word, seed)
                        : file_requests(spec.file);
}

std::string request_body(const TextRequest& request, const std::string& tag, ServeRoute route,
                         const std::string& model) {
  json body;
  body["model"] = model;
  const std::string state = "[" + tag + "] " + request.state;
  if (route == ServeRoute::ServeRoute_systemone) {
    body["state"] = state;
    json questions = json::object();
    for (size_t q = 0; q < request.questions.size(); ++q) {
      json criteria = json::object();
      for (const std::string& option : request.questions[q].options) criteria[option] = nullptr;
      questions[cat("q", q)] = {{"type", "choice"},
                                {"instructions", request.questions[q].instructions},
                                {"criteria", std::move(criteria)}};
    }
    body["questions"] = std::move(questions);
  } else {
    body["input"] = state;
    json questions = json::array();
    for (const TextQuestion& question : request.questions) {
      json choices = json::array();
      for (const std::string& option : question.options) choices.push_back({{"value", option}});
      questions.push_back({{"type", "choice"},
                           {"instructions", question.instructions},
                           {"choices", std::move(choices)}});
    }
    body["questions"] = std::move(questions);
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<std::vector<double>> answer_probabilities(const nlohmann::json& response,
                                                      const TextRequest& request,
                                                      ServeRoute route) {
  std::vector<std::vector<double>> probs;
  try {
    const nlohmann::json& answers = response.at("answers");
    for (size_t q = 0; q < request.questions.size(); ++q) {
      const TextQuestion& question = request.questions[q];
      std::vector<double> p;
      if (route == ServeRoute::ServeRoute_systemone) {
        const nlohmann::json& by_key = answers.at(cat("q", q)).at("probabilities");
        for (const std::string& option : question.options) p.push_back(by_key.at(option));
      } else {
        for (const nlohmann::json& entry : answers.at(q).at("probabilities"))
          p.push_back(entry.at("probability"));
      }
      if (p.size() != question.options.size()) throw Error("wrong number of probabilities");
      probs.push_back(std::move(p));
    }
  } catch (const std::exception& e) {
    throw Error(cat("unexpected response: ", e.what()));
  }
  return probs;
}

}  // namespace flide::cli
