// JSON values given to the model as text (decision_api.md §1.4): what Python's
// json.dumps(value, ensure_ascii=False) writes, byte for byte, because that is how the OpenJev
// helper renders object/array states, instructions and descriptions: ", " and ": " separators,
// keys in the caller's order (hence ordered_json), non-ASCII kept, floats as Python's repr.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace flide::server {

std::string json_text(const nlohmann::ordered_json& value);

}  // namespace flide::server
