// UTF-8 stepping, validation and NFC through utf8proc; see unicode.h for why these classes.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace flide::tok {

bool is_white_space(char32_t c) {
  for (const CodeRange& r : white_space_ranges)
    if (c >= r.first && c <= r.last) return true;
  return false;
}

bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;  // Join_Control
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

size_t utf8_invalid_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {  // ASCII fast path: most text is mostly ASCII
      ++i;
      continue;
    }
    utf8proc_int32_t c;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          utf8proc_ssize_t(s.size() - i), &c);
    if (n <= 0) return i;
    i += size_t(n);
  }
  return std::string_view::npos;
}

char32_t utf8_next(std::string_view s, size_t& i) {
  uint8_t b = uint8_t(s[i]);
  int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  char32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n; ++k) c = (c << 6) | (uint8_t(s[i + k]) & 0x3F);
  i += size_t(n);
  return c;
}

char32_t utf8_prev(std::string_view s, size_t& i) {
  do --i;
  while ((uint8_t(s[i]) & 0xC0) == 0x80);
  size_t at = i;
  return utf8_next(s, at);
}

void utf8_append(char32_t c, std::string& out) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_int32_t(c), buf);
  out.append(reinterpret_cast<const char*>(buf), size_t(n));
}

namespace {

std::string nfc_utf8proc(std::string_view s) {
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                   &out, utf8proc_option_t(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  FLIDE_CHECK(n >= 0, "utf8proc NFC failed: ", utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), size_t(n));
}

// Code points below U+0300 neither decompose nor combine with what precedes them (canonical
// class 0, NFC_Quick_Check Yes), so there is a normalization boundary before each: NFC maps them
// to themselves and never looks across them. Their UTF-8 starts with a byte below 0x80 or in
// 0xC0..0xCB.
bool starts_cold(uint8_t b) {
  return b < 0x80 || (b >= 0xC0 && b < 0xCC);
}

}  // namespace

std::string nfc(std::string_view s) {
  // Only the runs of code points from U+0300 up go through utf8proc, each with the one code
  // point before it (a starter they may compose with, e.g. "e" + U+0301): most text has a few
  // such characters in long stretches that NFC leaves alone.
  std::string out;
  out.reserve(s.size());
  size_t copied = 0, i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0xCC) {  // a cold code point's first byte, or any continuation byte
      ++i;
      continue;
    }
    size_t begin = i;  // the run's first hot code point; back up over one code point if any
    if (begin > copied) utf8_prev(s, begin);
    size_t end = i + 1;
    while (end < s.size() && !starts_cold(uint8_t(s[end]))) ++end;
    out.append(s.substr(copied, begin - copied));
    out += nfc_utf8proc(s.substr(begin, end - begin));
    copied = i = end;
  }
  out.append(s.substr(copied));
  return out;
}

}  // namespace flide::tok
