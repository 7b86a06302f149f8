// PCRE2 wrapper behind regex.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <cstdio>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace flide::tok {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// The members of a [...] class matching White_Space, e.g. "\x{9}-\x{d}\x{20}...".
std::string white_space_class_body() {
  std::string body;
  for (const CodeRange& r : white_space_ranges) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "\\x{%x}", unsigned(r.first));
    body += buf;
    if (r.last == r.first) continue;
    std::snprintf(buf, sizeof buf, "-\\x{%x}", unsigned(r.last));
    body += buf;
  }
  return body;
}

// \s -> [ws] and \S -> [^ws] outside classes, \s -> ws inside one. \S inside a class has no
// PCRE2 spelling without class subtraction and is left alone (it then differs on U+180E only).
std::string with_unicode_white_space(std::string_view pattern) {
  const std::string ws = white_space_class_body();
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[++i];
      if (e == 's')
        out += in_class ? ws : "[" + ws + "]";
      else if (e == 'S' && !in_class)
        out += "[^" + ws + "]";
      else if (e == 'Q') {  // \Q...\E quotes everything up to \E
        size_t end = pattern.find("\\E", i + 1);
        size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out += pattern.substr(i - 1, stop - (i - 1));
        i = stop - 1;
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      size_t end = pattern.find(":]", i + 2);  // POSIX [:name:] inside a class
      if (end != std::string_view::npos) {
        out += pattern.substr(i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, const std::string& where) {
  std::string rewritten = with_unicode_white_space(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  auto code = std::make_shared<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                             PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!code->code)
    throw Error(cat(where, ": regex does not compile with PCRE2 (", pcre2_message(error),
                    " near offset ", offset, " of the rewritten pattern ", rewritten, ")"));
  // Falls back to the interpreter on failure (or for a mode not compiled).
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
  code_ = std::move(code);
}

// split_isolated's pieces of text from `from` up to the end of the last match, matching with the
// PCRE2 `options` given; a match attempt that returns PCRE2_ERROR_PARTIAL ends the scan.
std::vector<std::pair<size_t, size_t>> Regex::pieces_to_last_match(std::string_view text,
                                                                   size_t from,
                                                                   uint32_t options) const {
  std::vector<std::pair<size_t, size_t>> pieces;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap = from;
  while (from < text.size()) {
    // The caller validated the UTF-8 once; PCRE2 would otherwise re-check the rest of the
    // subject on every call, which is quadratic in the text length.
    int rc = pcre2_match(code_->code, subject, text.size(), from, PCRE2_NO_UTF_CHECK | options,
                         match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) break;
    if (rc < 0) throw Error(cat("pre-tokenizer regex failed: ", pcre2_message(rc)));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    size_t begin = ovector[0], end = ovector[1];
    if (begin == end) {  // empty match: HF drops the empty piece and moves on one character
      if (begin == text.size()) break;
      from = begin;
      utf8_next(text, from);
      continue;
    }
    if (gap < begin) pieces.emplace_back(gap, begin);
    pieces.emplace_back(begin, end);
    gap = from = end;
  }
  return pieces;
}

std::vector<std::pair<size_t, size_t>> Regex::split_isolated(std::string_view text,
                                                             size_t from) const {
  std::vector<std::pair<size_t, size_t>> pieces = pieces_to_last_match(text, from, 0);
  const size_t gap = pieces.empty() ? from : pieces.back().second;
  if (gap < text.size()) pieces.emplace_back(gap, text.size());
  return pieces;
}

std::vector<std::pair<size_t, size_t>> Regex::final_split(std::string_view text) const {
  // Under PCRE2_PARTIAL_HARD a match attempt that reads past the end (a greedy run, a
  // lookahead) returns PCRE2_ERROR_PARTIAL at once, so every complete match returned before it
  // was decided by text alone, and so were the failed attempts at the start positions of the
  // gaps: appending text changes neither.
  return pieces_to_last_match(text, 0, PCRE2_PARTIAL_HARD);
}

}  // namespace flide::tok
