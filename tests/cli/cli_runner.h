// Running the built `flide` binary from tests: command line in, exit status and captured
// stdout/stderr out, plus scratch directories and the shipped tiny model's location.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tiny_model.h"

namespace flide::test {

struct CliResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the signal that killed it, 0 when it exited
  std::string out;
  std::string err;
};

// Runs `flide <args>` (args are shell words, quote them with shell_quote) with `input` on stdin.
CliResult run_flide(const std::string& args, const std::string& input = "");

std::string shell_quote(const std::string& word);

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

int64_t tiny_model_vocab_size();  // from its config.json (top level or text_config)

// Each non-empty line of `text` parsed as JSON (a test failure and null for a bad line).
std::vector<nlohmann::json> json_lines(const std::string& text);

}  // namespace flide::test
