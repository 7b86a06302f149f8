// The few Unicode facts the tokenizer needs beyond PCRE2: UTF-8 validation and stepping, NFC,
// and the White_Space / word-character classes HF `tokenizers` uses (Oniguruma's \s and Rust's
// \w). They live in one place so the regex rewrite and the added-token rules agree.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace flide::tok {

// Unicode White_Space (what Oniguruma's \s matches in HF tokenizers); PCRE2's \s also matches
// U+180E, which Unicode dropped from White_Space in 6.3.
struct CodeRange {
  char32_t first, last;
};
inline constexpr CodeRange white_space_ranges[] = {
    {0x09, 0x0D},     {0x20, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
};

bool is_white_space(char32_t c);
// Rust regex's Unicode \w (letters, marks, decimal and letter numbers, connector punctuation,
// joiners), which HF uses for AddedToken.single_word.
bool is_word_char(char32_t c);

// Byte offset of the first invalid UTF-8 sequence (surrogates and overlongs included), or npos.
size_t utf8_invalid_at(std::string_view s);
// Decodes the code point starting at s[i] (s valid UTF-8) and moves i past it.
char32_t utf8_next(std::string_view s, size_t& i);
// Decodes the code point ending just before s[i] (s valid UTF-8) and moves i to its start.
char32_t utf8_prev(std::string_view s, size_t& i);
void utf8_append(char32_t c, std::string& out);

// Canonical composition (NFC) of valid UTF-8 text.
std::string nfc(std::string_view s);

}  // namespace flide::tok
