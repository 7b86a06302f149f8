// tok::nfc normalizes only the runs of code points from U+0300 up (with the code point before
// each); this checks it against utf8proc's NFC of the whole string on random mixes of ASCII,
// Latin-1, combining marks (composing, reordering), singletons, Hangul jamo, Indic two-part
// vowels, curly quotes, CJK and emoji, and on the classic cases one by one.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace flide::tok {
namespace {

std::string whole_nfc(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                   &out, utf8proc_option_t(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  EXPECT_GE(n, 0);
  return std::string(reinterpret_cast<const char*>(out), size_t(std::max<utf8proc_ssize_t>(n, 0)));
}

std::string utf8(std::initializer_list<char32_t> code_points) {
  std::string out;
  for (char32_t c : code_points) utf8_append(c, out);
  return out;
}

TEST(NfcTest, ClassicCases) {
  EXPECT_EQ(nfc(utf8({'e', 0x301})), utf8({0xE9}));  // compose with ASCII
  EXPECT_EQ(nfc(utf8({'x', 'A', 0x30A, 'y'})), utf8({'x', 0xC5, 'y'}));
  EXPECT_EQ(nfc(utf8({0x212B})), utf8({0xC5}));                    // singleton
  EXPECT_EQ(nfc(utf8({0xE2, 0x301})), utf8({0x1EA5}));             // Latin-1 starter composes
  EXPECT_EQ(nfc(utf8({'a', 0x302, 0x323})), utf8({0x1EAD}));       // reorder, then compose
  EXPECT_EQ(nfc(utf8({0x1100, 0x1161, 0x11A8})), utf8({0xAC01}));  // Hangul L V T
  EXPECT_EQ(nfc(utf8({0xCBF, 0xCD5})), utf8({0xCC0}));             // Kannada two-part vowel
  EXPECT_EQ(nfc(utf8({'a', 0x340})), utf8({0xE0}));                // U+0340 -> U+0300
  const std::string plain = "plain ASCII and caf\xC3\xA9, with \xE2\x80\x99quotes\xE2\x80\x99";
  EXPECT_EQ(nfc(plain), plain);
  EXPECT_EQ(nfc(""), "");
}

TEST(NfcTest, RandomMixesMatchWholeStringNfc) {
  const std::vector<char32_t> pool = {
      'a',    'e',    'A',    'o',     ' ',    '\n',   '.',   '\'',  0xE9,  0xE2,
      0xC5,   0x300,  0x301,  0x302,   0x308,  0x323,  0x327, 0x340, 0x344, 0x212B,
      0x1100, 0x1161, 0x11A8, 0xAC00,  0x915,  0x93C,  0xCBF, 0xCD5, 0xB47, 0xB3E,
      0x2019, 0x2014, 0x65E5, 0x1F642, 0x200D, 0xFB2C, 0x5B7, 0x5BC};
  std::mt19937 rng(7);
  for (int round = 0; round < 4000; ++round) {
    std::string s;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i) utf8_append(pool[rng() % pool.size()], s);
    ASSERT_EQ(nfc(s), whole_nfc(s)) << "round " << round;
  }
}

}  // namespace
}  // namespace flide::tok
