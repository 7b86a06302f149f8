// Tokenizer::encode_appended against the definition, encode(text + suffix) minus encode(text),
// on random chat-shaped texts (added tokens, white space, letters, digits, accents, CJK) and
// short suffixes, with the shipped tokenizer and, when ../shared is present, Qwen2's: whenever it
// answers, the answer is the definition's; whenever the definition says text's ids survive
// appending, it answers, except where an added-token boundary moves (never in these texts).
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using flide::Tokenizer;

void check(const fs::path& file) {
  if (!fs::exists(file)) GTEST_SKIP() << file << " is absent";
  const Tokenizer tok = Tokenizer::load(file);
  const std::vector<std::string> fragments = {
      "<|im_start|>", "<|im_end|>", "<think>", "</think>", "user\n", "State:\n", "\n\n", " ",
      "  ",           "Question",   " the",    "A",        "b",      "42",       "é",    "中文",
      "\t",           "?",          "'s",      "\n"};
  const std::vector<std::string> suffixes = {"A", "z", " A", "\n", "B", "é", "1", "AB"};
  std::mt19937 rng(std::random_device{}());
  int answered = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(0, 12)(rng);
    for (int i = 0; i < n; ++i)
      text += fragments[std::uniform_int_distribution<size_t>(0, fragments.size() - 1)(rng)];
    const std::string& suffix =
        suffixes[std::uniform_int_distribution<size_t>(0, suffixes.size() - 1)(rng)];
    const std::vector<int32_t> alone = tok.encode(text), whole = tok.encode(text + suffix);
    const bool kept =
        whole.size() >= alone.size() && std::equal(alone.begin(), alone.end(), whole.begin());
    const auto got = tok.encode_appended(text, {suffix}).front();
    if (got) {
      ++answered;
      ASSERT_TRUE(kept) << "text \"" << text << "\" suffix \"" << suffix << "\"";
      EXPECT_EQ(*got,
                std::vector<int32_t>(whole.begin() + std::ptrdiff_t(alone.size()), whole.end()))
          << "text \"" << text << "\" suffix \"" << suffix << "\"";
    } else {
      EXPECT_FALSE(kept) << "text \"" << text << "\" suffix \"" << suffix << "\"";
    }
  }
  EXPECT_GT(answered, 100);
}

TEST(EncodeAppended, MatchesTheDefinitionShipped) {
  check(fs::path(FLIDE_SOURCE_DIR) / "models/flide-tiny-random/tokenizer.json");
}

TEST(EncodeAppended, MatchesTheDefinitionQwen2) {
  check(fs::path(FLIDE_SHARED_DIR) / "data/tokenizers/qwen2/tokenizer.json");
}

}  // namespace
