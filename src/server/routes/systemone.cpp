// Validation of a System One body and its translation to OpenJev questions (§1.1, §1.4), and
// the response (§1.2). Question types map one to one: choice -> options keyed by the criteria
// keys; score -> options "0".."N-1" described by the levels; noul -> yes/no (true first, so
// p[0] is P(true)).
#include "server/routes/systemone.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "server/routes/answers.h"
#include "server/routes/budgets.h"
#include "server/routes/errors.h"
#include "server/routes/json_text.h"
#include "server/routes/question_tree.h"

namespace flide::server {

namespace {

using json = nlohmann::ordered_json;

constexpr Route kRoute = Route::Route_systemone;
// llama.cpp's parse cap: more questions is 413 naming "questions" whatever the budgets.
constexpr size_t kMaxQuestions = 4096;
constexpr size_t kMaxImages = 8;
constexpr size_t kMinLevels = 2;
constexpr size_t kMaxLevels = 10;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw invalid_field(kRoute, path, what);
}

bool is_structured(const json& value) {
  return value.is_string() || value.is_object() || value.is_array();
}

bool has_content(const json& value) {
  return value.is_string() ? !value.get_ref<const std::string&>().empty() : !value.empty();
}

// A string as is, an object or array as JSON text (§1.4).
std::string text_of(const json& value) {
  return value.is_string() ? value.get<std::string>() : json_text(value);
}

// "state" and "instructions": a non-empty string, object or array.
std::string required_text(const json& body, const char* key, const std::string& path) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) fail(path, "must be provided");
  if (!is_structured(*it) || !has_content(*it))
    fail(path, "must be a non-empty string, object or array, got " + shown(*it));
  return text_of(*it);
}

// An option's or level's description: null renders as "" (the line ends in ": ").
std::string description_text(const json& value, const std::string& path, bool null_allowed) {
  if (value.is_null() && null_allowed) return "";
  if (!is_structured(value))
    fail(path, std::string("must be a string, an object") +
                   (null_allowed ? ", an array or null" : " or an array") + ", got " +
                   value.type_name());
  return text_of(value);
}

bool is_base64(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0) return false;
  size_t end = s.size();
  for (int pad = 0; pad < 2 && end > 0 && s[end - 1] == '='; ++pad) --end;
  for (size_t i = 0; i < end; ++i) {
    const char c = s[i];
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && c != '+' && c != '/') return false;
  }
  return true;
}

bool is_data_url(const json& value) {
  if (!value.is_string()) return false;
  const std::string& s = value.get_ref<const std::string&>();
  const size_t marker = s.find(";base64,");
  return s.rfind("data:", 0) == 0 && marker != std::string::npos &&
         is_base64(std::string_view(s).substr(marker + 8));
}

// llama.cpp's media fields: "images" (alias "files") are validated, then refused with 501 once
// the rest of the body is valid (flide serves text-only checkpoints); "videos" must be absent,
// null or []. Returns whether any image was given.
bool check_media(const json& body) {
  bool any_image = false;
  for (const char* key : {"images", "files"}) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_array()) fail(key, "must be an array of data URLs, got " + shown(*it));
    if (it->size() > kMaxImages) fail(key, cat("too many images, the maximum is ", kMaxImages));
    for (size_t i = 0; i < it->size(); ++i)
      if (!is_data_url((*it)[i]))
        fail(cat(key, '[', i, ']'), "must be a base64 data URL (data:<type>;base64,<data>)");
    any_image = any_image || !it->empty();
  }
  const auto videos = body.find("videos");
  if (videos != body.end() && !videos->is_null() && !(videos->is_array() && videos->empty()))
    fail("videos", "videos are not supported (give null or [])");
  return any_image;
}

// One question as the response needs it.
struct Asked {
  std::string id;
  QuestionType type = QuestionType::QuestionType_choice;
  std::vector<std::string> keys;  // choice: the criteria keys in order
  json legend;                    // score: {"0": level, ...}, levels unchanged
  size_t n_options = 0;
};

DecisionQuestion choice_question(const json& criteria, const std::string& path, Asked& asked) {
  if (!criteria.is_object() || criteria.empty())
    fail(path, "must be a non-empty object (option key -> description), got " + shown(criteria));
  if (criteria.size() > size_t(kMaxOptions))
    fail(path, cat(criteria.size(), " options, at most ", kMaxOptions, " are supported"));
  DecisionQuestion q;
  q.type = QuestionType::QuestionType_choice;
  for (const auto& [key, description] : criteria.items()) {
    q.options.push_back({key, description_text(description, path + "." + key, true)});
    asked.keys.push_back(key);
  }
  return q;
}

DecisionQuestion score_question(const json& criteria, const std::string& path, Asked& asked) {
  if (!criteria.is_array() || criteria.size() < kMinLevels || criteria.size() > kMaxLevels)
    fail(path, cat("must be an array of ", kMinLevels, " to ", kMaxLevels, " levels, got ",
                   criteria.is_array() ? cat(criteria.size()) : shown(criteria)));
  DecisionQuestion q;
  q.type = QuestionType::QuestionType_score;
  asked.legend = json::object();
  for (size_t i = 0; i < criteria.size(); ++i) {
    const std::string key = std::to_string(i);
    q.options.push_back({key, description_text(criteria[i], cat(path, '[', i, ']'), false)});
    asked.legend[key] = criteria[i];
  }
  return q;
}

// Optional (null: absent) {"true": description, "false": description}. §1.4 renders
// `criteria.true or "The statement is true."`, Python's `or`: an absent, null, empty string,
// empty object or empty array description takes the template's default (decision_prompt.cpp).
DecisionQuestion noul_question(const json* criteria, const std::string& path) {
  DecisionQuestion q;
  q.type = QuestionType::QuestionType_noul;
  q.options = {{"yes", ""}, {"no", ""}};
  if (criteria == nullptr) return q;
  if (!criteria->is_object())
    fail(path, "must be null or an object with \"true\" and \"false\" descriptions, got " +
                   shown(*criteria));
  for (size_t i = 0; i < 2; ++i) {
    const char* key = i == 0 ? "true" : "false";
    const auto it = criteria->find(key);
    if (it != criteria->end() && !((it->is_object() || it->is_array()) && it->empty()))
      q.options[i].description = description_text(*it, path + "." + key, true);
  }
  return q;
}

QuestionType question_type(const json& question, const std::string& path) {
  const auto type = question.find("type");
  if (type == question.end()) fail(path, "must be provided");
  for (QuestionType t : kQuestionTypes)
    if (*type == question_type_name(t)) return t;
  fail(path, "must be one of: choice, score, noul");
}

DecisionQuestion question(const std::string& id, const json& value, Asked& asked) {
  const std::string path = "questions." + id;
  if (!value.is_object()) fail(path, "must be an object, got " + shown(value));
  const QuestionType type = question_type(value, path + ".type");
  const std::string instructions = required_text(value, "instructions", path + ".instructions");
  const std::string criteria_path = path + ".criteria";
  const auto it = value.find("criteria");
  const json* criteria = it == value.end() || it->is_null() ? nullptr : &*it;
  if (criteria == nullptr && type != QuestionType::QuestionType_noul)
    fail(criteria_path, "must be provided");

  DecisionQuestion q;
  if (type == QuestionType::QuestionType_choice)
    q = choice_question(*criteria, criteria_path, asked);
  else if (type == QuestionType::QuestionType_score)
    q = score_question(*criteria, criteria_path, asked);
  else
    q = noul_question(criteria, criteria_path);
  q.instructions = instructions;
  asked.id = id;
  asked.type = type;
  asked.n_options = q.options.size();
  return q;
}

json answer(const Asked& asked, const std::vector<double>& p) {
  json out;
  out["type"] = question_type_name(asked.type);
  switch (asked.type) {
    case QuestionType::QuestionType_noul:
      out["noul"] = p[0];
      break;
    case QuestionType::QuestionType_choice: {
      out["choice"] = asked.keys[argmax(p)];
      json probabilities = json::object();
      for (size_t i = 0; i < p.size(); ++i) probabilities[asked.keys[i]] = p[i];
      out["probabilities"] = std::move(probabilities);
      out["confidence"] = choice_confidence(p);
      break;
    }
    case QuestionType::QuestionType_score: {
      out["score"] = expected_level(p);
      out["legend"] = asked.legend;
      json probabilities = json::object();
      for (size_t i = 0; i < p.size(); ++i) probabilities[std::to_string(i)] = p[i];
      out["probabilities"] = std::move(probabilities);
      out["confidence"] = score_confidence(p);
      break;
    }
  }
  return out;
}

}  // namespace

PreparedRequest prepare_systemone(const json& body, const RouteContext& ctx) {
  if (!body.is_object()) fail("", "the request body must be a JSON object, got " + shown(body));
  const auto model = body.find("model");
  if (model != body.end() && !model->is_string())
    fail("model", std::string("must be a string, got ") + model->type_name());
  const std::string state = required_text(body, "state", "state");
  const bool has_images = check_media(body);

  const auto questions = body.find("questions");
  if (questions == body.end() || questions->is_null()) fail("questions", "must be provided");
  if (!questions->is_object() || questions->empty())
    fail("questions", "must be a non-empty object (id -> question), got " + shown(*questions));
  if (questions->size() > kMaxQuestions)
    throw too_large(
        cat("questions: ", questions->size(), " questions, the maximum is ", kMaxQuestions));
  check_question_count(questions->size(), ctx.limits);

  std::vector<DecisionQuestion> asked_questions;
  std::vector<Asked> asked;
  std::vector<std::string> paths;
  for (const auto& [id, value] : questions->items()) {
    if (id.empty()) fail("questions", "a question id must be a non-empty string");
    asked.emplace_back();
    asked_questions.push_back(question(id, value, asked.back()));
    paths.push_back("questions." + id);
  }
  if (has_images) throw not_supported("images: this model does not accept images");

  PreparedRequest out = prepare_tree(ctx, kRoute, state, asked_questions, paths);
  out.respond = [model_id = ctx.model_id, asked = std::move(asked),
                 input_tokens = out.input_tokens](const TreeResult& result) {
    json answers = json::object();
    for (size_t i = 0; i < asked.size(); ++i)
      answers[asked[i].id] = answer(asked[i], question_probs(result, i, asked[i].n_options));
    json usage;
    usage["input_tokens"] = input_tokens;
    usage["output_tokens"] = 0;
    json response;
    response["model"] = model_id;
    response["answers"] = std::move(answers);
    response["usage"] = std::move(usage);
    return response;
  };
  return out;
}

}  // namespace flide::server
