// POST /tokenize and POST /detokenize, in the shapes llama.cpp's server and vLLM answer, chosen
// by the key the caller used:
//   {"content": text, "add_special"?, "with_pieces"?}   (llama.cpp)
//     -> {"tokens": [id, ...]}, or with_pieces {"tokens": [{"id", "piece"}, ...]} where a
//        piece that is not whole UTF-8 is its byte values, as llama.cpp sends them;
//   {"prompt": text, "add_special_tokens"?, "model"?}   (vLLM)
//     -> {"count", "max_model_len", "tokens", "token_strs": null};
//   {"tokens": [id, ...]} -> {"content": text, "prompt": text} (both servers' key: the request
//     shapes are the same, so the answer carries both).
// Qwen3.5 tokenizers add no special tokens, so add_special(_tokens) is validated and changes
// nothing. Errors are ApiErrors (400 invalid_request_error) naming the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace flide::server {

nlohmann::ordered_json tokenize_answer(const nlohmann::ordered_json& body,
                                       const Tokenizer& tokenizer, int64_t max_model_len);
nlohmann::ordered_json detokenize_answer(const nlohmann::ordered_json& body,
                                         const Tokenizer& tokenizer);

}  // namespace flide::server
