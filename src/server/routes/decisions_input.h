// The text an OpenAI /v1/decisions request gives the OpenJev prompt (decision_api.md §2.4 and
// the Addendum): its `input` becomes the System One state and each question's `instructions`
// its question text. Both validate as they render (400 naming the path, openai_fields.h).
//   input, a string:                        the state as is.
//   input, only user messages:              their text joined by a blank line (vLLM's rule).
//   input, any other trajectory (system,    the items as JSON text (json_text.h), which is what
//     developer, assistant messages, tool     /v1/systemone does with an array state; the
//     calls and outputs):                     prompt_cache_breakpoint markers are left out, as
//                                             they are cache hints, not evidence.
//   content parts:                          text as is, input_json `data` as JSON text, joined
//                                           by a blank line.
// Image parts are refused (400): flide serves text-only checkpoints.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace flide::server {

std::string input_state_text(const nlohmann::ordered_json& input);

std::string instructions_text(const nlohmann::ordered_json& instructions, const std::string& path);

}  // namespace flide::server
