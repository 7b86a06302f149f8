// Validation of an OpenAI Decisions body, its translation to OpenJev questions (§2.4) and the
// response (§2.2). Usage follows §2.2's choice: input_tokens counts every question's prompt in
// full (what a caller would be billed for asking separately), cached_tokens the part of it that
// was served from the shared trunk instead of being computed again; nothing is generated.
#include "server/routes/decisions.h"

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "server/routes/answers.h"
#include "server/routes/budgets.h"
#include "server/routes/decisions_input.h"
#include "server/routes/errors.h"
#include "server/routes/openai_fields.h"
#include "server/routes/question_tree.h"

namespace flide::server {

namespace {

using json = nlohmann::ordered_json;

constexpr Route kRoute = Route::Route_decisions;
// Schema bounds (decisions.d.ts); the option count is further bounded by kMaxOptions letters.
constexpr size_t kMaxQuestions = 400;
constexpr size_t kMinChoices = 2;
constexpr size_t kMaxChoices = 255;
constexpr size_t kMinLevels = 2;
constexpr size_t kMaxLevels = 10;
constexpr size_t kMaxSafetyIdentifier = 128;  // characters

// One question as the response needs it.
struct Asked {
  QuestionType type = QuestionType::QuestionType_choice;
  json name;                        // the caller's name, or null
  std::vector<json> values;         // choice: the typed values
  std::vector<std::string> labels;  // score: the level labels
  size_t n_options = 0;
};

const json& required_array(const json& object, const char* key, const std::string& path, size_t min,
                           size_t max, const char* what) {
  const std::string field = member(path, key);
  const auto it = object.find(key);
  if (it == object.end()) openai_fail(field, "must be provided");
  if (!it->is_array() || it->size() < min || it->size() > max)
    openai_fail(field, cat("must be an array of ", min, " to ", max, " ", what, ", got ",
                           it->is_array() ? cat(it->size()) : shown(*it)));
  return *it;
}

DecisionQuestion choice_question(const json& question, const std::string& path, Asked& asked) {
  const json& choices =
      required_array(question, "choices", path, kMinChoices, kMaxChoices, "choices");
  const std::string choices_path = member(path, "choices");
  if (choices.size() > size_t(kMaxOptions))
    openai_fail(choices_path, cat(choices.size(), " choices, at most ", kMaxOptions,
                                  " are supported by this model"));
  DecisionQuestion q;
  q.type = QuestionType::QuestionType_choice;
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string choice_path = element(choices_path, i);
    check_object(choices[i], choice_path, {"value", "description"}, "a choice");
    const auto value = choices[i].find("value");
    if (value == choices[i].end()) openai_fail(member(choice_path, "value"), "must be provided");
    if (!value->is_string() && !value->is_boolean())
      openai_fail(member(choice_path, "value"),
                  "must be a string or a boolean, got " + shown(*value));
    // Typed: "true" and true are distinct values (and both render as true in the prompt).
    for (size_t j = 0; j < i; ++j)
      if (asked.values[j] == *value)
        openai_fail(member(choice_path, "value"), cat("repeats choices[", j, "].value"));
    const std::string* description = optional_string(choices[i], "description", choice_path, false);
    q.options.push_back({value->is_string() ? value->get<std::string>() : value->dump(),
                         description ? *description : ""});
    asked.values.push_back(*value);
  }
  return q;
}

DecisionQuestion score_question(const json& question, const std::string& path, Asked& asked) {
  const json& levels = required_array(question, "levels", path, kMinLevels, kMaxLevels, "levels");
  const std::string levels_path = member(path, "levels");
  DecisionQuestion q;
  q.type = QuestionType::QuestionType_score;
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::string level_path = element(levels_path, i);
    check_object(levels[i], level_path, {"label", "description"}, "a level");
    const std::string& label = string_field(levels[i], "label", level_path);
    const std::string* description = optional_string(levels[i], "description", level_path, false);
    q.options.push_back({std::to_string(i), description && !description->empty()
                                                ? label + ": " + *description
                                                : label});
    asked.labels.push_back(label);
  }
  return q;
}

DecisionQuestion question(const json& value, const std::string& path, Asked& asked) {
  if (!value.is_object()) openai_fail(path, "must be an object, got " + shown(value));
  const std::string& type = string_field(value, "type", path);
  DecisionQuestion q;
  if (type == "predicate") {
    check_object(value, path, {"type", "instructions", "name"}, "a predicate question");
    q.type = QuestionType::QuestionType_noul;  // yes = true first, template descriptions
    q.options = {{"yes", ""}, {"no", ""}};
  } else if (type == "choice") {
    check_object(value, path, {"type", "instructions", "name", "choices"}, "a choice question");
  } else if (type == "score") {
    check_object(value, path, {"type", "instructions", "name", "levels"}, "a score question");
  } else {
    openai_fail(member(path, "type"),
                cat("must be one of: predicate, choice, score; got \"", type, '"'));
  }
  const std::string* name = optional_string(value, "name", path, false);
  asked.name = name ? json(*name) : json();
  const auto instructions = value.find("instructions");
  if (instructions == value.end()) openai_fail(member(path, "instructions"), "must be provided");
  const std::string text = instructions_text(*instructions, member(path, "instructions"));

  if (type == "choice") q = choice_question(value, path, asked);
  if (type == "score") q = score_question(value, path, asked);
  q.instructions = text;
  asked.type = q.type;
  asked.n_options = q.options.size();
  return q;
}

void check_cache_options(const json& body) {
  const auto it = body.find("prompt_cache_options");
  if (it == body.end() || it->is_null()) return;
  const std::string path = "prompt_cache_options";
  check_object(*it, path, {"mode", "ttl"}, "prompt_cache_options");
  optional_enum(*it, "mode", path, {"implicit", "explicit"}, true);
  optional_enum(*it, "ttl", path, {"30m"}, false);
}

void check_safety_identifier(const json& body) {
  const std::string* id = optional_string(body, "safety_identifier", "", true);
  if (id == nullptr) return;
  size_t chars = 0;  // code points: UTF-8 bytes that do not continue a sequence
  for (unsigned char c : *id) chars += (c & 0xC0) != 0x80;
  if (chars > kMaxSafetyIdentifier)
    openai_fail("safety_identifier",
                cat("at most ", kMaxSafetyIdentifier, " characters, got ", chars));
}

json answer(const Asked& asked, const std::vector<double>& p) {
  json out;
  switch (asked.type) {
    case QuestionType::QuestionType_noul:
      out["type"] = "predicate";
      out["name"] = asked.name;
      out["probability"] = p[0];
      break;
    case QuestionType::QuestionType_choice: {
      out["type"] = "choice";
      out["name"] = asked.name;
      out["choice"] = asked.values[argmax(p)];
      json probabilities = json::array();
      for (size_t i = 0; i < p.size(); ++i) {
        json entry;
        entry["value"] = asked.values[i];
        entry["probability"] = p[i];
        probabilities.push_back(std::move(entry));
      }
      out["probabilities"] = std::move(probabilities);
      out["confidence"] = choice_confidence(p);
      break;
    }
    case QuestionType::QuestionType_score: {
      out["type"] = "score";
      out["name"] = asked.name;
      out["score"] = expected_level(p);
      json probabilities = json::array();
      for (size_t i = 0; i < p.size(); ++i) {
        json entry;
        entry["value"] = i;
        entry["label"] = asked.labels[i];
        entry["probability"] = p[i];
        probabilities.push_back(std::move(entry));
      }
      out["probabilities"] = std::move(probabilities);
      out["confidence"] = score_confidence(p);
      break;
    }
  }
  return out;
}

json usage(int64_t input_tokens, int64_t cached_tokens) {
  json out;
  out["input_tokens"] = input_tokens;
  out["input_tokens_details"]["cached_tokens"] = cached_tokens;
  out["input_tokens_details"]["cache_write_tokens"] = 0;
  out["output_tokens"] = 0;
  out["output_tokens_details"]["reasoning_tokens"] = 0;
  out["total_tokens"] = input_tokens;
  return out;
}

}  // namespace

PreparedRequest prepare_decisions(const json& body, const RouteContext& ctx) {
  if (!body.is_object())
    openai_fail("", "the request body must be a JSON object, got " + shown(body));
  check_object(body, "",
               {"model", "input", "questions", "prompt_cache_key", "prompt_cache_options",
                "safety_identifier"},
               "the request");
  const std::string& model = string_field(body, "model", "");
  if (!ctx.serves(model)) {
    std::string names;
    for (const std::string& name : ctx.model_names())
      names += cat(names.empty() ? "" : ", ", "\"", name, "\"");
    throw not_found("model",
                    cat("the model \"", model, "\" is not served here (this server serves ", names,
                        "; flide serve --served-model-name)"));
  }
  const auto input = body.find("input");
  if (input == body.end()) openai_fail("input", "must be provided");
  const std::string state = input_state_text(*input);

  const json& questions = required_array(body, "questions", "", 1, kMaxQuestions, "questions");
  check_question_count(questions.size(), ctx.limits);
  optional_string(body, "prompt_cache_key", "", true);
  check_cache_options(body);
  check_safety_identifier(body);

  std::vector<DecisionQuestion> asked_questions;
  std::vector<Asked> asked(questions.size());
  std::vector<std::string> paths;
  for (size_t i = 0; i < questions.size(); ++i) {
    paths.push_back(element("questions", i));
    asked_questions.push_back(question(questions[i], paths.back(), asked[i]));
  }

  PreparedRequest out = prepare_tree(ctx, kRoute, state, asked_questions, paths);
  out.respond = [model_id = ctx.model_id, asked = std::move(asked),
                 input_tokens = out.rendered_tokens,
                 cached_tokens = out.rendered_tokens - out.input_tokens](const TreeResult& result) {
    json answers = json::array();
    for (size_t i = 0; i < asked.size(); ++i)
      answers.push_back(answer(asked[i], question_probs(result, i, asked[i].n_options)));
    json response;
    response["model"] = model_id;
    response["answers"] = std::move(answers);
    response["usage"] = usage(input_tokens, cached_tokens);
    return response;
  };
  return out;
}

}  // namespace flide::server
