// /tokenize and /detokenize (see tokenize_routes.h).
#include "server/http/tokenize_routes.h"

#include <string>
#include <vector>

#include "core/error.h"
#include "server/prepared_request.h"
#include "tokenizer/unicode.h"

namespace flide::server {

namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& message) {
  throw ApiError(400, "invalid_request_error", message);
}

void check_object(const json& body) {
  if (!body.is_object())
    fail(cat("the request body must be a JSON object, got ", body.type_name()));
}

void check_optional_bool(const json& body, const char* key) {
  const auto it = body.find(key);
  if (it != body.end() && !it->is_null() && !it->is_boolean())
    fail(cat("\"", key, "\" must be a boolean, got ", it->type_name()));
}

// llama.cpp sends a piece that is not whole UTF-8 (a token cut inside a character) as bytes.
json piece_of(const std::string& piece) {
  if (tok::utf8_invalid_at(piece) == std::string::npos) return piece;
  json bytes = json::array();
  for (char c : piece) bytes.push_back(int(static_cast<unsigned char>(c)));
  return bytes;
}

}  // namespace

json tokenize_answer(const json& body, const Tokenizer& tokenizer, int64_t max_model_len) {
  check_object(body);
  const bool vllm = !body.contains("content") && body.contains("prompt");
  const char* key = vllm ? "prompt" : "content";
  const auto text = body.find(key);
  if (text == body.end())
    fail("\"content\" (llama.cpp) or \"prompt\" (vLLM) must be provided: the text to tokenize");
  if (!text->is_string()) fail(cat("\"", key, "\" must be a string, got ", text->type_name()));
  check_optional_bool(body, vllm ? "add_special_tokens" : "add_special");
  check_optional_bool(body, "with_pieces");
  const std::vector<int32_t> ids = tokenizer.encode(text->get_ref<const std::string&>());

  json out;
  if (vllm) {
    out["count"] = ids.size();
    out["max_model_len"] = max_model_len;
    out["tokens"] = ids;
    out["token_strs"] = nullptr;
    return out;
  }
  if (!body.value("with_pieces", false)) {
    out["tokens"] = ids;
    return out;
  }
  json tokens = json::array();
  for (int32_t id : ids)
    tokens.push_back({{"id", id}, {"piece", piece_of(tokenizer.decode({id}))}});
  out["tokens"] = std::move(tokens);
  return out;
}

json detokenize_answer(const json& body, const Tokenizer& tokenizer) {
  check_object(body);
  const auto tokens = body.find("tokens");
  if (tokens == body.end()) fail("\"tokens\" must be provided: an array of token ids");
  if (!tokens->is_array()) fail(cat("\"tokens\" must be an array, got ", tokens->type_name()));
  const int64_t vocab = tokenizer.vocab_size();
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& id = (*tokens)[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab)
      fail(cat("tokens[", i, "]: ", id.dump(), " is not a token id (an integer from 0 to ",
               vocab - 1, ")"));
    ids.push_back(id.get<int32_t>());
  }
  const std::string text = tokenizer.decode(ids);
  json out;
  out["content"] = text;
  out["prompt"] = text;
  return out;
}

}  // namespace flide::server
