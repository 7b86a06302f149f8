// Test helpers that run the flide binary (see cli_runner.h).
#include "cli_runner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace flide::test {

namespace {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

CliResult run_flide(const std::string& args, const std::string& input) {
  ScratchDir dir;
  const std::filesystem::path in = dir.write("stdin", input);
  // exec: the shell becomes flide, so a crash shows as a signal, not as a shell exit code.
  const std::string command = "exec " + shell_quote(FLIDE_BINARY) + " " + args + " <" +
                              shell_quote(in) + " >" + shell_quote(dir.path() / "stdout") + " 2>" +
                              shell_quote(dir.path() / "stderr");
  const int status = std::system(command.c_str());
  CliResult result;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.out = slurp(dir.path() / "stdout");
  result.err = slurp(dir.path() / "stderr");
  return result;
}

ScratchDir::ScratchDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("flide_cli_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::filesystem::path ScratchDir::write(const std::string& name, const std::string& text) const {
  const std::filesystem::path file = path_ / name;
  std::ofstream(file, std::ios::binary) << text;
  return file;
}

int64_t tiny_model_vocab_size() {
  const nlohmann::json config = nlohmann::json::parse(slurp(tiny_model_dir() / "config.json"));
  const nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
  return text.at("vocab_size").get<int64_t>();
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(parsed.is_discarded()) << "not JSON: " << line;
    lines.push_back(parsed.is_discarded() ? nlohmann::json() : parsed);
  }
  return lines;
}

}  // namespace flide::test
