// The official `openai` npm client (pinned to 7.55.0 in openai_client/package.json, the schema of
// record for /v1/decisions) against a real server with an API key: openai_client/decisions.mjs
// makes the calls and checks every answer against the client's declared types. npm installs
// into the build tree; without node, npm or the network the test skips and says why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "server_process.h"

namespace flide::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

bool on_path(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

std::string quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

TEST(OpenAIClient, DecisionsCreateGetsAWellTypedAnswer) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  if (!on_path("node") || !on_path("npm")) GTEST_SKIP() << "node or npm is not installed";
  const fs::path dir = FLIDE_OPENAI_CLIENT_DIR;
  fs::create_directories(dir);
  for (const char* file : {"package.json", "decisions.mjs"})
    fs::copy_file(fs::path(FLIDE_OPENAI_CLIENT_SOURCE) / file, dir / file,
                  fs::copy_options::overwrite_existing);
  if (slurp(dir / "node_modules/openai/package.json").find("\"version\": \"7.55.0\"") ==
      std::string::npos) {
    const std::string install = "cd " + quoted(dir.string()) +
                                " && timeout 300 npm install --no-audit --no-fund "
                                "--loglevel=error >npm.log 2>&1";
    if (std::system(install.c_str()) != 0)
      GTEST_SKIP() << "npm install openai@7.55.0 failed (no network?):\n" << slurp(dir / "npm.log");
  }

  ServerProcess server("--api-key test-key");
  ASSERT_GT(server.port(), 0);
  const std::string run_id = std::to_string(getpid());
  const fs::path out_file = dir / ("out-" + run_id + ".json"), err_file = dir / ("err-" + run_id);
  const std::string run = "node " + quoted((dir / "decisions.mjs").string()) + " " +
                          quoted(server.url() + "/v1") + " test-key flide-tiny-random >" +
                          quoted(out_file.string()) + " 2>" + quoted(err_file.string());
  const int status = std::system(run.c_str());
  const std::string out = slurp(out_file), err = slurp(err_file);
  fs::remove(out_file);
  fs::remove(err_file);
  EXPECT_EQ(status, 0) << out << err << "\nserver:\n" << server.stderr_text();
  const nlohmann::json result = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(result.is_object()) << out;
  EXPECT_EQ(result["ok"], true);
  EXPECT_EQ(result["answers"].size(), 3u);
  EXPECT_EQ(result["errors"]["bad_request"]["status"], 400);
  EXPECT_EQ(result["errors"]["unknown_model"]["status"], 404);
  EXPECT_EQ(result["errors"]["wrong_key"]["status"], 401);
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

}  // namespace
}  // namespace flide::test
