// Pre-tokenizer regexes from tokenizer.json, compiled with PCRE2 (UTF + UCP, JIT when
// available). HF runs them with Oniguruma; the syntax the HF files use ((?i:...), \p{L},
// lookahead) means the same in both, and \s / \S are rewritten to Unicode White_Space so that
// PCRE2 agrees with Oniguruma on U+180E too (unicode.h).
#pragma once

#include <cstdint>
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
  // With `from` > 0, the pieces of text[from, end) as the scan from 0 finds them when one of its
  // matches ends at `from` (text[0, from) stays the context of lookbehinds).
  std::vector<std::pair<size_t, size_t>> split_isolated(std::string_view text,
                                                        size_t from = 0) const;

  // The pieces of split_isolated(text) that stay its pieces whatever text is appended: those up
  // to the end of the last match found before the first match attempt that reads the end of
  // `text` (PCRE2 hard partial matching).
  std::vector<std::pair<size_t, size_t>> final_split(std::string_view text) const;

 private:
  std::vector<std::pair<size_t, size_t>> pieces_to_last_match(std::string_view text, size_t from,
                                                              uint32_t options) const;

  struct Code;
  std::shared_ptr<const Code> code_;  // compiled code is read-only, shared by copies and threads
};

}  // namespace flide::tok
