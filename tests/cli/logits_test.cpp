// `flide logits` on the shipped tiny model: output shape, --all agreeing with the last-position
// run, ids outside the vocabulary, and a truncated checkpoint failing with a message (not a crash).
#include <gtest/gtest.h>

#include <cmath>

#include "cli_runner.h"

namespace flide::test {
namespace {

using nlohmann::json;

std::string logits(const std::filesystem::path& model, const std::string& extra) {
  return "logits --model " + shell_quote(model.string()) + " --threads 2 " + extra;
}

TEST(CliLogitsTest, LastPositionAndAllPositions) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const size_t vocab = size_t(tiny_model_vocab_size());
  const CliResult last = run_flide(logits(tiny_model_dir(), "--ids 1,2,3 --dtype f64"));
  ASSERT_EQ(last.exit_code, 0) << last.err;
  const json a = json::parse(last.out);
  EXPECT_EQ(a["ids"], json({1, 2, 3}));
  const std::vector<double> row = a["logits"].get<std::vector<double>>();
  ASSERT_EQ(row.size(), vocab);
  for (double x : row) ASSERT_TRUE(std::isfinite(x));

  const CliResult all = run_flide(logits(tiny_model_dir(), "--ids=1,2,3 --all --dtype f64"));
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const json b = json::parse(all.out);
  ASSERT_EQ(b["logits"].size(), 3u);
  for (const json& r : b["logits"]) ASSERT_EQ(r.size(), vocab);
  // The last position is the same computation either way (f64: only summation order may differ).
  const std::vector<double> last_of_all = b["logits"][2].get<std::vector<double>>();
  for (size_t v = 0; v < vocab; ++v) ASSERT_NEAR(last_of_all[v], row[v], 1e-9) << v;
}

TEST(CliLogitsTest, IdOutsideTheVocabulary) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const std::string id = std::to_string(tiny_model_vocab_size());
  const CliResult r = run_flide(logits(tiny_model_dir(), "--ids 1," + id));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("flide: error: --ids: token id " + id + " outside the vocabulary"),
            std::string::npos)
      << r.err;
}

TEST(CliLogitsTest, TruncatedCheckpointFailsWithAMessage) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ScratchDir dir;
  const std::filesystem::path model = dir.path() / "model";
  std::filesystem::copy(tiny_model_dir(), model, std::filesystem::copy_options::recursive);
  std::filesystem::path largest;
  for (const auto& entry : std::filesystem::directory_iterator(model))
    if (entry.path().extension() == ".safetensors" &&
        (largest.empty() || entry.file_size() > std::filesystem::file_size(largest)))
      largest = entry.path();
  ASSERT_FALSE(largest.empty()) << "no safetensors file in " << tiny_model_dir();
  std::filesystem::resize_file(largest, std::filesystem::file_size(largest) / 2);

  const CliResult r = run_flide(logits(model, "--ids 1,2,3"));
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << "\n" << r.err;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("flide: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(largest.filename().string()), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flide::test
