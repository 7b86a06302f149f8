// `flide tokenize`: ids from --text and from stdin agree, special tokens are matched, and a
// tokenizer can be given as a model directory or as a file.
#include <gtest/gtest.h>

#include "cli_runner.h"

namespace flide::test {
namespace {

using nlohmann::json;

const std::string kQwen2 = std::string(FLIDE_SHARED_DIR) + "/data/tokenizers/qwen2/tokenizer.json";

std::vector<int> ids_of(const CliResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(out.is_object() && out.contains("ids")) << r.out;
  return out.is_object() ? out.value("ids", std::vector<int>()) : std::vector<int>();
}

TEST(CliTokenizeTest, TextFlagAndStdinAgree) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const std::string model = "--model " + shell_quote(tiny_model_dir().string());
  const std::string text = "Hello world, this is flide.\n";
  const std::vector<int> from_flag =
      ids_of(run_flide("tokenize " + model + " --text " + shell_quote(text)));
  const std::vector<int> from_stdin = ids_of(run_flide("tokenize " + model, text));
  EXPECT_FALSE(from_flag.empty());
  EXPECT_EQ(from_flag, from_stdin);
  EXPECT_EQ(ids_of(run_flide("tokenize " + model, "")), std::vector<int>());
}

TEST(CliTokenizeTest, SpecialTokensAreMatched) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const std::string model = "--model " + shell_quote(tiny_model_dir().string());
  const std::vector<int> special =
      ids_of(run_flide("tokenize " + model + " --text '<|im_start|>'"));
  ASSERT_EQ(special.size(), 1u);
  const std::vector<int> turn =
      ids_of(run_flide("tokenize " + model + " --text '<|im_start|>user'"));
  ASSERT_GE(turn.size(), 2u);
  EXPECT_EQ(turn[0], special[0]);
}

TEST(CliTokenizeTest, TokenizerFile) {
  if (!std::filesystem::exists(kQwen2)) GTEST_SKIP() << kQwen2 << " not found";
  // Known Qwen2 ids: "Hello" 9707, " world" 1879, <|im_end|> 151645.
  EXPECT_EQ(ids_of(run_flide("tokenize --tokenizer " + shell_quote(kQwen2) +
                             " --text 'Hello world<|im_end|>'")),
            (std::vector<int>{9707, 1879, 151645}));
}

TEST(CliTokenizeTest, MissingTokenizer) {
  ScratchDir dir;
  const CliResult r =
      run_flide("tokenize --model " + shell_quote(dir.path().string()) + " --text x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("tokenizer.json\" not found"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flide::test
