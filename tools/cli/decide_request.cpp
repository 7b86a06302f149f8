// Validation of `flide decide` input lines (see decide_request.h). Every field read is checked
// for presence, type and range here, at the edge, so the engine only ever sees well-formed trees.
#include "decide_request.h"

#include <limits>
#include <unordered_set>

#include "core/error.h"

namespace flide::cli {

namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& path, const std::string& message) {
  throw Error(path + ": " + message);
}

const json& required(const json& object, const char* key, const std::string& path) {
  auto it = object.find(key);
  if (it == object.end()) fail(path, "missing");
  return *it;
}

json echo_id(const json& object, const std::string& path) {
  auto it = object.find("id");
  if (it == object.end() || it->is_null()) return nullptr;
  if (!it->is_string() && !it->is_number_integer())
    fail(path, cat("must be a string or an integer, got ", it->type_name()));
  return *it;
}

int64_t integer(const json& value, const std::string& path) {
  if (!value.is_number_integer()) fail(path, cat("must be an integer, got ", value.type_name()));
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(path, "out of range");
  return value.get<int64_t>();
}

std::vector<int32_t> token_ids(const json& value, const std::string& path, int64_t vocab_size) {
  if (!value.is_array()) fail(path, cat("must be an array of token ids, got ", value.type_name()));
  if (value.empty()) fail(path, "no token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string where = cat(path, '[', i, ']');
    const int64_t id = integer(value[i], where);
    if (id < 0 || id >= vocab_size)
      fail(where, cat("token id ", id, " outside the vocabulary [0, ", vocab_size, ")"));
    ids.push_back(int32_t(id));
  }
  return ids;
}

std::optional<int> answer(const json& question, const std::string& path, size_t n_options) {
  auto it = question.find("answer");
  if (it == question.end() || it->is_null()) return std::nullopt;
  const int64_t index = integer(*it, path);
  if (index < 0 || uint64_t(index) >= n_options)
    fail(path, cat(index, " is not an option index (0 to ", n_options - 1, ")"));
  return int(index);
}

// A dataset multiple-choice question as an OpenJev choice question: "[A] <option text>: ".
DecisionQuestion text_question(const json& q, const std::string& path) {
  const json& text = required(q, "question", path + ".question");
  if (!text.is_string() || text.get_ref<const std::string&>().empty())
    fail(path + ".question",
         cat("must be a non-empty string, got ", text.is_string() ? "\"\"" : text.type_name()));
  const std::string options_path = path + ".options";
  const json& options = required(q, "options", options_path);
  if (!options.is_array()) fail(options_path, cat("must be an array, got ", options.type_name()));
  if (options.empty()) fail(options_path, "no options");
  if (options.size() > size_t(kMaxOptions))
    fail(options_path, cat(options.size(), " options, at most ", kMaxOptions, " are supported"));

  DecisionQuestion out;
  out.type = QuestionType::QuestionType_choice;
  out.instructions = text.get<std::string>();
  for (size_t i = 0; i < options.size(); ++i) {
    if (!options[i].is_string())
      fail(cat(options_path, '[', i, ']'), cat("must be a string, got ", options[i].type_name()));
    out.options.push_back({options[i].get<std::string>(), ""});
  }
  return out;
}

}  // namespace

DecideRequest parse_decide_request(const json& line, int64_t vocab_size) {
  if (!line.is_object())
    throw Error(cat("a request must be a JSON object, got ", line.type_name()));
  DecideRequest request;
  request.id = echo_id(line, "\"id\"");

  const bool has_text = line.contains("context");
  const bool has_ids = line.contains("context_ids");
  if (has_text && has_ids)
    fail("\"context_ids\"", "give either \"context\" or \"context_ids\", not both");
  if (!has_text && !has_ids) fail("\"context\"", "missing (or give \"context_ids\")");
  request.is_text = has_text;
  if (has_text) {
    const json& context = line.at("context");
    if (!context.is_string())
      fail("\"context\"", cat("must be a string, got ", context.type_name()));
    if (context.get_ref<const std::string&>().empty()) fail("\"context\"", "empty");
    request.context = context.get<std::string>();
  } else {
    request.tree.nodes.emplace_back().tokens =
        token_ids(line.at("context_ids"), "\"context_ids\"", vocab_size);
  }

  const json& questions = required(line, "questions", "\"questions\"");
  if (!questions.is_array())
    fail("\"questions\"", cat("must be an array, got ", questions.type_name()));
  if (questions.empty()) fail("\"questions\"", "no questions");
  for (size_t i = 0; i < questions.size(); ++i) {
    const std::string path = cat("\"questions\"[", i, ']');
    const json& q = questions[i];
    if (!q.is_object()) fail(path, cat("must be an object, got ", q.type_name()));
    DecideQuestion out;
    out.id = echo_id(q, path + ".id");
    size_t n_options = 0;
    if (has_text) {
      request.prompts.push_back(text_question(q, path));
      n_options = request.prompts.back().options.size();
    } else {
      TreeNode child;
      child.parent = 0;
      child.tokens = token_ids(required(q, "ids", path + ".ids"), path + ".ids", vocab_size);
      child.readout = ReadoutKind::ReadoutKind_choice;
      const std::string labels_path = path + ".label_ids";
      child.label_ids = token_ids(required(q, "label_ids", labels_path), labels_path, vocab_size);
      std::unordered_set<int32_t> seen;
      for (size_t l = 0; l < child.label_ids.size(); ++l)
        if (!seen.insert(child.label_ids[l]).second)
          fail(cat(labels_path, '[', l, ']'), cat("token id ", child.label_ids[l], " repeated"));
      n_options = child.label_ids.size();
      request.tree.nodes.push_back(std::move(child));
    }
    out.answer = answer(q, path + ".answer", n_options);
    request.questions.push_back(std::move(out));
  }
  return request;
}

Tree decide_tree(const DecideRequest& request, const Tokenizer* tokenizer,
                 const DecisionCalibration& calibration) {
  if (!request.is_text) return request.tree;
  FLIDE_CHECK(tokenizer != nullptr, "text requests need the tokenizer");
  return build_decision_tree(*tokenizer, request.context, request.prompts, &calibration);
}

}  // namespace flide::cli
