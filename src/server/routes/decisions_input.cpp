#include "server/routes/decisions_input.h"

#include <set>
#include <vector>

#include "core/error.h"
#include "server/routes/errors.h"
#include "server/routes/json_text.h"
#include "server/routes/openai_fields.h"

namespace flide::server {

namespace {

using json = nlohmann::ordered_json;

// OpenAI's stated bounds on one input_json `data` (shared.d.ts, DecisionInputJSON).
constexpr int kMaxJsonLevels = 32;
constexpr int64_t kMaxJsonValues = 10000;
constexpr size_t kMaxJsonBytes = 256 * 1024;

const char* const kBlankLine = "\n\n";

std::string joined(const std::vector<std::string>& texts) {
  std::string out;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out += kBlankLine;
    out += texts[i];
  }
  return out;
}

// Containers nest at most kMaxJsonLevels deep; returns the values counted so far.
int64_t count_values(const json& value, int level, const std::string& path) {
  if (!value.is_structured()) return 1;
  if (level > kMaxJsonLevels)
    openai_fail(path, cat("nested more than ", kMaxJsonLevels, " container levels"));
  int64_t n = 1;
  for (const json& item : value) n += count_values(item, level + 1, path);
  return n;
}

std::string json_part_text(const json& part, const std::string& path) {
  check_object(part, path, {"type", "data"}, "an input_json part");
  const std::string data_path = member(path, "data");
  const auto data = part.find("data");
  if (data == part.end()) openai_fail(data_path, "must be provided");
  bool objects = data->is_object();
  if (data->is_array()) {
    objects = true;
    for (const json& item : *data) objects = objects && item.is_object();
  }
  if (!objects)
    openai_fail(data_path, "must be an object or an array of objects, got " + shown(*data));
  if (count_values(*data, 1, data_path) > kMaxJsonValues)
    openai_fail(data_path, cat("more than ", kMaxJsonValues, " values"));
  if (data->dump(-1, ' ', false).size() > kMaxJsonBytes)
    openai_fail(data_path, cat("more than ", kMaxJsonBytes, " bytes of compact JSON"));
  return json_text(*data);
}

void check_breakpoint(const json& part, const std::string& path) {
  const auto it = part.find("prompt_cache_breakpoint");
  if (it == part.end() || it->is_null()) return;
  const std::string bp = member(path, "prompt_cache_breakpoint");
  check_object(*it, bp, {"mode"}, "a prompt_cache_breakpoint");
  if (string_field(*it, "mode", bp) != "explicit")
    openai_fail(member(bp, "mode"), "must be \"explicit\"");
}

// Which parts a content array takes (the part unions of decisions.d.ts).
struct Parts {
  bool json;        // input_json
  bool image;       // input_image (validated by name only: refused)
  bool breakpoint;  // prompt_cache_breakpoint on text and image parts
};
constexpr Parts kUserParts{true, true, true};
constexpr Parts kSystemParts{false, false, true};
constexpr Parts kToolOutputParts{false, true, true};
constexpr Parts kQuestionParts{true, true, false};

std::string input_part_text(const json& part, const std::string& path, Parts parts) {
  if (!part.is_object()) openai_fail(path, "must be an object, got " + shown(part));
  const std::string& type = string_field(part, "type", path);
  if (type == "input_text") {
    if (parts.breakpoint) {
      check_object(part, path, {"type", "text", "prompt_cache_breakpoint"}, "an input_text part");
      check_breakpoint(part, path);
    } else {
      check_object(part, path, {"type", "text"}, "an input_text part");
    }
    return string_field(part, "text", path);
  }
  if (type == "input_json" && parts.json) return json_part_text(part, path);
  if (type == "input_image" && parts.image)
    openai_fail(path, "image parts are not supported: this model reads text only");
  openai_fail(member(path, "type"),
              cat("must be one of: input_text", parts.json ? ", input_json" : "",
                  parts.image ? ", input_image" : "", "; got \"", type, '"'));
}

// A string, or an array of parts rendered and joined.
std::string content_text(const json& content, const std::string& path, Parts parts) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    openai_fail(path, "must be a string or an array of parts, got " + shown(content));
  std::vector<std::string> texts;
  for (size_t i = 0; i < content.size(); ++i)
    texts.push_back(input_part_text(content[i], element(path, i), parts));
  return joined(texts);
}

void check_assistant_content(const json& content, const std::string& path) {
  if (content.is_string()) return;
  if (!content.is_array())
    openai_fail(path, "must be a string or an array of parts, got " + shown(content));
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_path = element(path, i);
    const json& part = content[i];
    if (!part.is_object()) openai_fail(part_path, "must be an object, got " + shown(part));
    const std::string& type = string_field(part, "type", part_path);
    if (type == "output_text") {
      check_object(part, part_path, {"type", "text"}, "an output_text part");
      string_field(part, "text", part_path);
    } else if (type == "refusal") {
      check_object(part, part_path, {"type", "refusal"}, "a refusal part");
      string_field(part, "refusal", part_path);
    } else {
      openai_fail(member(part_path, "type"),
                  cat("must be one of: output_text, refusal; got \"", type, '"'));
    }
  }
}

const json& required(const json& object, std::string_view key, const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end()) openai_fail(member(path, key), "must be provided");
  return *it;
}

// The input items seen so far: call ids that outputs must match, and whether every item is a
// user message (the joined-text rendering) with those messages' texts.
struct Trajectory {
  std::set<std::string> function_calls;
  std::set<std::string> custom_tool_calls;
  bool user_only = true;
  std::vector<std::string> user_texts;
};

void check_message(const json& item, const std::string& path, Trajectory& t) {
  const std::string& role = string_field(item, "role", path);
  const std::string content_path = member(path, "content");
  if (role == "user") {
    check_object(item, path, {"type", "role", "content"}, "a user message");
    t.user_texts.push_back(content_text(required(item, "content", path), content_path, kUserParts));
    return;
  }
  t.user_only = false;
  if (role == "developer" || role == "system") {
    check_object(item, path, {"type", "role", "content"}, cat("a ", role, " message"));
    content_text(required(item, "content", path), content_path, kSystemParts);
  } else if (role == "assistant") {
    check_object(item, path, {"type", "role", "content", "phase"}, "an assistant message");
    optional_enum(item, "phase", path, {"commentary", "final_answer"}, true);
    check_assistant_content(required(item, "content", path), content_path);
  } else {
    openai_fail(member(path, "role"),
                cat("must be one of: user, developer, system, assistant; got \"", role, '"'));
  }
}

void check_call_fields(const json& item, const std::string& path, const char* payload) {
  string_field(item, "call_id", path);
  string_field(item, "name", path);
  string_field(item, payload, path);
  optional_string(item, "id", path, true);
  optional_string(item, "namespace", path, true);
  optional_enum(item, "status", path, {"in_progress", "completed", "incomplete"}, true);
}

void check_output_fields(const json& item, const std::string& path,
                         const std::set<std::string>& calls, const char* call_type) {
  const std::string& call_id = string_field(item, "call_id", path);
  if (calls.count(call_id) == 0)
    openai_fail(member(path, "call_id"),
                cat("no earlier ", call_type, " item has call_id \"", call_id, '"'));
  content_text(required(item, "output", path), member(path, "output"), kToolOutputParts);
  optional_string(item, "id", path, true);
  optional_enum(item, "status", path, {"in_progress", "completed", "incomplete"}, true);
}

void check_item(const json& item, const std::string& path, Trajectory& t) {
  if (!item.is_object()) openai_fail(path, "must be an object, got " + shown(item));
  const std::string* type = optional_string(item, "type", path, false);
  if (type == nullptr || *type == "message") return check_message(item, path, t);
  t.user_only = false;
  if (*type == "function_call") {
    check_object(item, path, {"type", "arguments", "call_id", "name", "id", "namespace", "status"},
                 "a function_call item");
    check_call_fields(item, path, "arguments");
    t.function_calls.insert(item.at("call_id").get<std::string>());
  } else if (*type == "function_call_output") {
    check_object(item, path, {"type", "call_id", "output", "id", "status"},
                 "a function_call_output item");
    check_output_fields(item, path, t.function_calls, "function_call");
  } else if (*type == "custom_tool_call") {
    check_object(item, path, {"type", "call_id", "input", "name", "id", "namespace", "status"},
                 "a custom_tool_call item");
    check_call_fields(item, path, "input");
    t.custom_tool_calls.insert(item.at("call_id").get<std::string>());
  } else if (*type == "custom_tool_call_output") {
    check_object(item, path, {"type", "call_id", "output", "id", "status"},
                 "a custom_tool_call_output item");
    check_output_fields(item, path, t.custom_tool_calls, "custom_tool_call");
  } else {
    openai_fail(member(path, "type"),
                cat("must be one of: message, function_call, function_call_output, "
                    "custom_tool_call, custom_tool_call_output; got \"",
                    *type, '"'));
  }
}

// The items as evidence: cache breakpoints removed from every content part.
json without_breakpoints(json items) {
  for (json& item : items)
    for (const char* key : {"content", "output"}) {
      const auto parts = item.find(key);
      if (parts == item.end() || !parts->is_array()) continue;
      for (json& part : *parts) part.erase("prompt_cache_breakpoint");
    }
  return items;
}

}  // namespace

std::string input_state_text(const json& input) {
  if (input.is_string()) {
    if (input.get_ref<const std::string&>().empty()) openai_fail("input", "must not be empty");
    return input.get<std::string>();
  }
  if (!input.is_array() || input.empty())
    openai_fail("input", "must be a non-empty string or array of items, got " + shown(input));
  Trajectory t;
  for (size_t i = 0; i < input.size(); ++i) check_item(input[i], element("input", i), t);
  const std::string text =
      t.user_only ? joined(t.user_texts) : json_text(without_breakpoints(input));
  if (text.empty()) openai_fail("input", "has no text");
  return text;
}

std::string instructions_text(const json& instructions, const std::string& path) {
  const bool given = instructions.is_string() ? !instructions.get_ref<const std::string&>().empty()
                                              : instructions.is_array() && !instructions.empty();
  if (!given)
    openai_fail(path, "must be a non-empty string or array of parts, got " + shown(instructions));
  const std::string text = content_text(instructions, path, kQuestionParts);
  if (text.empty()) openai_fail(path, "has no text");
  return text;
}

}  // namespace flide::server
