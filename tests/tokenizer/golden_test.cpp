// Token ids and decoded text against HF `tokenizers`, from tests/data/tokenizer/NAME.golden.json
// written by tools/golden/tokenizer_goldens.py. NAME picks the tokenizer.json; a golden whose
// tokenizer is absent (../shared missing, model not generated yet) is skipped with a message.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using flide::Tokenizer;

namespace {

std::optional<fs::path> tokenizer_for(const std::string& name) {
  if (name == "qwen2") return fs::path(FLIDE_SHARED_DIR) / "data/tokenizers/qwen2/tokenizer.json";
  if (name == "flide-tiny")
    return fs::path(FLIDE_SOURCE_DIR) / "models/flide-tiny-random/tokenizer.json";
  return std::nullopt;
}

std::vector<fs::path> golden_files() {
  std::vector<fs::path> files;
  fs::path dir = fs::path(FLIDE_SOURCE_DIR) / "tests/data/tokenizer";
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::string file = entry.path().filename().string();
    if (file.size() > 12 && file.ends_with(".golden.json")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST(TokenizerGolden, MatchesHuggingFace) {
  std::vector<fs::path> files = golden_files();
  if (files.empty())
    GTEST_SKIP() << "no tests/data/tokenizer/*.golden.json yet (tools/golden/tokenizer_goldens.py)";

  std::string skipped;
  int checked = 0;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    nlohmann::json golden = nlohmann::json::parse(std::ifstream(file));
    std::string name = golden.at("tokenizer").get<std::string>();
    std::optional<fs::path> path = tokenizer_for(name);
    ASSERT_TRUE(path) << "unknown tokenizer name '" << name << "' in " << file;
    if (!fs::exists(*path)) {
      skipped += " " + name + " (no " + path->string() + ")";
      continue;
    }
    Tokenizer tok = Tokenizer::load(*path);
    const nlohmann::json& cases = golden.at("cases");
    EXPECT_GE(cases.size(), 250u);
    for (size_t i = 0; i < cases.size(); ++i) {
      std::string text = cases[i].at("text").get<std::string>();
      std::vector<int32_t> want = cases[i].at("ids").get<std::vector<int32_t>>();
      std::vector<int32_t> ids = tok.encode(text);
      EXPECT_EQ(ids, want) << name << " case " << i << ": " << cases[i].at("text").dump();
      // HF's own decode of its ids: NFC(text) for the NFC tokenizers.
      EXPECT_EQ(tok.decode(want), cases[i].at("decoded").get<std::string>())
          << name << " case " << i << ": " << cases[i].at("text").dump();
    }
    ++checked;
  }
  if (!skipped.empty()) std::cout << "golden tokenizers skipped:" << skipped << "\n";
  if (checked == 0) GTEST_SKIP() << "every golden's tokenizer.json is absent:" << skipped;
}
