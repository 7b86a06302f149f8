// Request bodies as JSON (see json_body.h).
#include "server/http/json_body.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "server/routes/json_depth.h"
#include "tokenizer/unicode.h"

namespace flide::server {

std::string untagged(const nlohmann::ordered_json::exception& e) {
  const std::string what = e.what();
  const size_t tag_end = what.find("] ");
  return tag_end == std::string::npos ? what : what.substr(tag_end + 2);
}

nlohmann::ordered_json parse_json_body(std::string_view body, Route route) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    throw malformed_json("the request body is empty: expected a JSON object");
  if (const size_t at = tok::utf8_invalid_at(body); at != std::string_view::npos) {
    char byte[8];
    std::snprintf(byte, sizeof byte, "0x%02X", unsigned(static_cast<unsigned char>(body[at])));
    throw malformed_json(cat("the request body is not valid UTF-8: byte ", byte, " at offset ", at,
                             " does not start a valid sequence"));
  }
  check_json_depth(body, kMaxJsonDepth, route);
  try {
    return nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::ordered_json::parse_error& e) {
    throw malformed_json(cat("the request body is not valid JSON: ", untagged(e)));
  } catch (const nlohmann::ordered_json::out_of_range& e) {
    // 406, a number such as 1e999: valid by RFC 8259's grammar, which lets a reader limit range.
    throw malformed_json(
        cat("the request body has a number too large for a double: ", untagged(e)));
  }
}

}  // namespace flide::server
