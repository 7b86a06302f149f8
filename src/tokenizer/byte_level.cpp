// The ByteLevel table, built once; see byte_level.h.
#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "tokenizer/unicode.h"

namespace flide::tok {
namespace {

struct Alphabet {
  std::array<std::string, 256> utf8;  // byte -> UTF-8 of its code point
  std::array<int16_t, 0x144> byte;    // code point -> byte, -1 outside the alphabet

  Alphabet() {
    byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      char32_t c = printable ? char32_t(b) : next_extra++;
      utf8_append(c, utf8[size_t(b)]);
      byte[c] = int16_t(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

}  // namespace

void byte_level_encode(std::string_view bytes, std::string& out) {
  const Alphabet& a = alphabet();
  for (char b : bytes) out += a.utf8[uint8_t(b)];
}

void byte_level_decode(std::string_view token, std::string& out) {
  const Alphabet& a = alphabet();
  size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    char32_t c = utf8_next(token, i);
    if (c >= a.byte.size() || a.byte[c] < 0) {
      out.resize(start);
      out += token;
      return;
    }
    out += char(a.byte[c]);
  }
}

}  // namespace flide::tok
