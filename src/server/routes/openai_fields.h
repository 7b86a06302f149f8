// Field checks for OpenAI's /v1/decisions schema (the `openai` npm package's
// resources/decisions.d.ts, decision_api.md Addendum). The schema is closed: an unknown field is
// refused, as vLLM does (extra="forbid"), so that a misspelt field is an error and not silently
// ignored. Every failure is 400 invalid_request_error whose message and "param" give the JSON
// path, e.g. `questions[2].choices[0].value`.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace flide::server {

[[noreturn]] void openai_fail(const std::string& path, const std::string& what);

// Path helpers: member("questions[0]", "name") -> "questions[0].name"; member("", "model") ->
// "model"; element("questions", 2) -> "questions[2]".
std::string member(const std::string& path, std::string_view key);
std::string element(const std::string& path, size_t index);

// `object` must be an object whose members are all among `fields`; `kind` names it in messages
// ("a choice question").
void check_object(const nlohmann::ordered_json& object, const std::string& path,
                  std::initializer_list<std::string_view> fields, std::string_view kind);

// A required string member.
const std::string& string_field(const nlohmann::ordered_json& object, std::string_view key,
                                const std::string& path);

// An optional string member: nullptr when absent (or null, where null_allowed).
const std::string* optional_string(const nlohmann::ordered_json& object, std::string_view key,
                                   const std::string& path, bool null_allowed);

// An optional member that, when present (and not null, where null_allowed), is one of `values`.
void optional_enum(const nlohmann::ordered_json& object, std::string_view key,
                   const std::string& path, std::initializer_list<std::string_view> values,
                   bool null_allowed);

}  // namespace flide::server
