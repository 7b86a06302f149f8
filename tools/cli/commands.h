// The flide subcommands. Each takes the arguments after its name, prints its own --help, and
// returns the process exit code (cli_common.h); anything it throws is reported by main as
// `flide: error: ...` with exit code 2.
#pragma once

#include <string>
#include <vector>

namespace flide::cli {

int cmd_decide(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_logits(const std::vector<std::string>& args);
int cmd_tokenize(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_bench_serve(const std::vector<std::string>& args);

}  // namespace flide::cli
