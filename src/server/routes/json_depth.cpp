#include "server/routes/json_depth.h"

#include <string>

#include "core/error.h"

namespace flide::server {

void check_json_depth(std::string_view body, int max_depth, Route route) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  size_t string_begin = 0;
  std::string_view last_string;  // the key candidate: a string followed by ':'
  std::string_view top_key;      // the member of the body's object being scanned
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        last_string = body.substr(string_begin, i - string_begin);
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        string_begin = i + 1;
        break;
      case ':':
        if (depth == 1) top_key = last_string;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          const std::string limit = cat("(more than ", max_depth, " levels)");
          if (top_key.empty())
            throw invalid_field(route, "", "the request body is nested too deeply " + limit);
          throw invalid_field(route, std::string(top_key), "nested too deeply " + limit);
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
}

}  // namespace flide::server
