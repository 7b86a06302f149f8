// Token ids against llama.cpp's tokenizer test vectors (produced with HF tokenizers) for Qwen2
// and GPT-2, read from ../shared/data/tokenizers; skipped when ../shared is absent. GPT-2 ships
// vocab.json + merges.txt only, so the test assembles the tokenizer.json HF builds from them
// (ByteLevel with the GPT-2 regex, no normalizer), which covers the use_regex path.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using flide::Tokenizer;

namespace {

const fs::path tokenizers_dir = fs::path(FLIDE_SHARED_DIR) / "data" / "tokenizers";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// .inp: texts each followed by "\n__ggml_vocab_test__\n"; .out: one line of ids per text.
std::vector<Case> read_vectors(const fs::path& dir) {
  std::string inp = read_file(dir / "llamacpp_vocab_test.inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t at = 0, end; (end = inp.find(separator, at)) != std::string::npos;
       at = end + separator.size())
    cases.push_back({inp.substr(at, end - at), {}});
  std::ifstream out(dir / "llamacpp_vocab_test.out");
  std::string line;
  for (Case& c : cases) {
    EXPECT_TRUE(std::getline(out, line)) << "fewer lines of ids than texts";
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

void expect_vectors(const Tokenizer& tok, const fs::path& dir) {
  std::vector<Case> cases = read_vectors(dir);
  ASSERT_GT(cases.size(), 40u);
  for (const Case& c : cases) {
    std::vector<int32_t> ids = tok.encode(c.text);
    EXPECT_EQ(ids, c.ids) << "text: \"" << c.text << "\"";
    EXPECT_EQ(tok.decode(ids), c.text);  // the vectors are NFC already
  }
}

// What HF builds for GPT-2 from vocab.json + merges.txt.
fs::path write_gpt2_tokenizer_json(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::parse(read_file(dir / "vocab.json"));
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(read_file(dir / "merges.txt"));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
  nlohmann::json j = {
      {"added_tokens",
       {{{"id", 50256},
         {"content", "<|endoftext|>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", true},
         {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", nullptr}}}};
  fs::path path = fs::path(testing::TempDir()) / "flide_gpt2_tokenizer.json";
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace

TEST(LlamaCppVectors, Qwen2) {
  fs::path dir = tokenizers_dir / "qwen2";
  if (!fs::exists(dir / "tokenizer.json")) GTEST_SKIP() << "no " << dir << " (needs ../shared)";
  expect_vectors(Tokenizer::load(dir / "tokenizer.json"), dir);
}

TEST(LlamaCppVectors, Gpt2) {
  fs::path dir = tokenizers_dir / "gpt2";
  if (!fs::exists(dir / "vocab.json")) GTEST_SKIP() << "no " << dir << " (needs ../shared)";
  Tokenizer tok = Tokenizer::load(write_gpt2_tokenizer_json(dir));
  expect_vectors(tok, dir);
  EXPECT_EQ(tok.vocab_size(), 50257);
}

TEST(Qwen2Tokenizer, SpecialTokensAndSize) {
  fs::path path = tokenizers_dir / "qwen2" / "tokenizer.json";
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (needs ../shared)";
  Tokenizer tok = Tokenizer::load(path);
  EXPECT_EQ(tok.vocab_size(), 151646);
  EXPECT_EQ(tok.token_id("<|im_start|>"), 151644);
  EXPECT_EQ(tok.token_id("Hello"), 9707);
  EXPECT_EQ(tok.token_id("no such token"), std::nullopt);
  std::vector<int32_t> ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(ids, (std::vector<int32_t>{151644, 872, 198, 6023, 151645}));
  EXPECT_EQ(tok.decode(ids), "<|im_start|>user\nhi<|im_end|>");
}

// 30 KB of mixed text must encode far below a decode step; the bound only catches quadratic
// regressions (it is loose so that loaded CI machines do not flake).
TEST(Qwen2Tokenizer, EncodesThirtyKilobytesQuickly) {
  fs::path path = tokenizers_dir / "qwen2" / "tokenizer.json";
  if (!fs::exists(path)) GTEST_SKIP() << "no " << path << " (needs ../shared)";
  Tokenizer tok = Tokenizer::load(path);
  std::string text;
  const std::string parts[] = {"The quick brown fox jumps over the lazy dog. ",
                               "1234567 ",
                               "Привет, мир! ",
                               "こんにちは世界。",
                               "if (x != 0) {\n\treturn y;\n}\n",
                               "🤖🚀 ",
                               "   \r\n",
                               "aaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  for (size_t i = 0; text.size() < 30000; ++i) text += parts[(i * 7) % std::size(parts)];
  text += std::string(2000, 'x') + std::string(2000, ' ') + "y";  // long single pre-tokens

  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok.encode(text);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << "encoded " << text.size() << " bytes into " << ids.size() << " tokens in " << ms
            << " ms\n";
  EXPECT_LT(ms, 250.0);
  EXPECT_EQ(tok.decode(ids), text);

  // encode() is const and shares no mutable state: threads must agree with the serial result.
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&] { r = tok.encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r, ids);
}
