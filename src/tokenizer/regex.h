// Pre-tokenizer regexes from tokenizer.json, compiled with PCRE2 (UTF + UCP, JIT when
// available). HF runs them with Oniguruma; the syntax the HF files use ((?i:...), \p{L},
// lookahead) means the same in both, and \s / \S are rewritten to Unicode White_Space so that
// PCRE2 agrees with Oniguruma on U+180E too (unicode.h).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flide::tok {

class Regex {
 public:
  // `where` prefixes any error message (file and field).
  Regex(std::string_view pattern, const std::string& where);

  // HF's Split behaviour "Isolated": every match and every gap between matches becomes a piece;
  // empty pieces are dropped. Returns [begin, end) byte offsets into `text` (valid UTF-8).
  std::vector<std::pair<size_t, size_t>> split_isolated(std::string_view text) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;  // compiled code is read-only, shared by copies and threads
};

}  // namespace flide::tok
