#include "server/routes/openai_fields.h"

#include "core/error.h"
#include "server/routes/errors.h"

namespace flide::server {

namespace {

using json = nlohmann::ordered_json;

std::string listed(std::initializer_list<std::string_view> names) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace

void openai_fail(const std::string& path, const std::string& what) {
  throw invalid_field(Route::Route_decisions, path, what);
}

std::string member(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : cat(path, '.', key);
}

std::string element(const std::string& path, size_t index) {
  return cat(path, '[', index, ']');
}

void check_object(const json& object, const std::string& path,
                  std::initializer_list<std::string_view> fields, std::string_view kind) {
  if (!object.is_object()) openai_fail(path, "must be an object, got " + shown(object));
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (std::string_view field : fields) known = known || key == field;
    if (!known)
      openai_fail(member(path, key), cat("unknown field (", kind, " has: ", listed(fields), ")"));
  }
}

const std::string& string_field(const json& object, std::string_view key, const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end()) openai_fail(member(path, key), "must be provided");
  if (!it->is_string()) openai_fail(member(path, key), "must be a string, got " + shown(*it));
  return it->get_ref<const std::string&>();
}

const std::string* optional_string(const json& object, std::string_view key,
                                   const std::string& path, bool null_allowed) {
  const auto it = object.find(key);
  if (it == object.end() || (null_allowed && it->is_null())) return nullptr;
  if (!it->is_string())
    openai_fail(member(path, key),
                cat("must be a string", null_allowed ? " or null" : "", ", got ", shown(*it)));
  return &it->get_ref<const std::string&>();
}

void optional_enum(const json& object, std::string_view key, const std::string& path,
                   std::initializer_list<std::string_view> values, bool null_allowed) {
  const std::string* value = optional_string(object, key, path, null_allowed);
  if (value == nullptr) return;
  for (std::string_view allowed : values)
    if (*value == allowed) return;
  openai_fail(member(path, key), cat("must be one of: ", listed(values),
                                     null_allowed ? ", null" : "", "; got \"", *value, '"'));
}

}  // namespace flide::server
