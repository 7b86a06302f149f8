// Tokenizer::prefix / encode(text, prefix) against the definition, encode(text), on random
// chat-shaped prefixes and continuations: added tokens (raw, lstrip-free), white-space runs at
// the seam, letters, digits, contractions, combining marks and characters NFC composes or
// changes (e + U+0301, U+212B), CJK, emoji. With the shipped tokenizer and, when ../shared is
// present, Qwen2's. Also: the part reused is most of a decision prompt's state, and misuse is
// an error.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using flide::Tokenizer;

const std::vector<std::string> kFragments = {"<|im_start|>",
                                             "<|im_end|>",
                                             "<think>",
                                             "</think>",
                                             "user\n",
                                             "State:\n",
                                             "\n\n",
                                             "\n",
                                             " ",
                                             "  ",
                                             "   ",
                                             "\t",
                                             " \n",
                                             "\r\n",
                                             "Question",
                                             " the",
                                             "A",
                                             "b",
                                             "word",
                                             "42",
                                             "7",
                                             ".",
                                             ",",
                                             "?!",
                                             "'s",
                                             "'re",
                                             "é",
                                             "e",
                                             "\xcc\x81" /* U+0301 */,
                                             "\xe2\x84\xab" /* U+212B, NFC -> U+00C5 */,
                                             "\xc2\xa0" /* NBSP */,
                                             "中文",
                                             "🙂",
                                             "ﬁ",
                                             "__",
                                             "--"};

std::string random_text(std::mt19937& rng, int max_fragments) {
  std::string text;
  const int n = std::uniform_int_distribution<int>(0, max_fragments)(rng);
  for (int i = 0; i < n; ++i)
    text += kFragments[std::uniform_int_distribution<size_t>(0, kFragments.size() - 1)(rng)];
  return text;
}

void check(const fs::path& file) {
  if (!fs::exists(file)) GTEST_SKIP() << file << " is absent";
  const Tokenizer tok = Tokenizer::load(file);
  std::mt19937 rng(std::random_device{}());
  int reused = 0, cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = random_text(rng, 30);
    const Tokenizer::Prefix prefix = tok.prefix(text);
    reused += prefix.shared_bytes() > 0;
    ASSERT_LE(prefix.shared_bytes(), text.size());
    for (int c = 0; c < 8; ++c) {
      const std::string whole = text + random_text(rng, 6);
      ++cases;
      ASSERT_EQ(tok.encode(whole, prefix), tok.encode(whole))
          << "prefix \"" << text << "\" text \"" << whole << "\"";
    }
  }
  EXPECT_GT(reused, 150) << "of " << 300 << " prefixes";
  EXPECT_EQ(cases, 2400);
}

TEST(TokenizerPrefix, MatchesTheDefinitionShipped) {
  check(fs::path(FLIDE_SOURCE_DIR) / "models/flide-tiny-random/tokenizer.json");
}

TEST(TokenizerPrefix, MatchesTheDefinitionQwen2) {
  check(fs::path(FLIDE_SHARED_DIR) / "data/tokenizers/qwen2/tokenizer.json");
}

// A decision request's prompts: everything but the last few bytes of the state is reused.
TEST(TokenizerPrefix, ReusesNearlyAllOfAState) {
  const fs::path file = fs::path(FLIDE_SOURCE_DIR) / "models/flide-tiny-random/tokenizer.json";
  const Tokenizer tok = Tokenizer::load(file);
  std::string state;
  for (int i = 0; i < 400; ++i) state += "The ship sailed north at dawn; sailors sang. ";
  const std::string head = "<|im_start|>user\nState:\n" + state + "\n\n";
  const Tokenizer::Prefix prefix = tok.prefix(head);
  EXPECT_GT(prefix.shared_bytes(), head.size() - 8);
  const std::string prompt = head + "Question: Where?\nOptions:\n[A] north: \n[B] south: " +
                             "<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(tok.encode(prompt, prefix), tok.encode(prompt));
  EXPECT_EQ(tok.encode(head, prefix), tok.encode(head));
}

TEST(TokenizerPrefix, MisuseIsAnError) {
  const Tokenizer tok =
      Tokenizer::load(fs::path(FLIDE_SOURCE_DIR) / "models/flide-tiny-random/tokenizer.json");
  const Tokenizer::Prefix prefix = tok.prefix("State: calm");
  EXPECT_THROW(tok.encode("Stat: calm", prefix), flide::Error);
  EXPECT_THROW(tok.encode("State: calm \xff", prefix), flide::Error);
  EXPECT_THROW(tok.prefix("bad \xc3"), flide::Error);
}

}  // namespace
