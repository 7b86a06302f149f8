// flide: the command-line front end. It dispatches to a subcommand and is the one place that
// turns any error escaping a command (bad flags, unreadable model, malformed files) into
// `flide: error: ...` and exit code 2, so user input never crashes the process.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_common.h"
#include "commands.h"

namespace {

constexpr const char* kUsage = R"(usage: flide <command> [options]

commands:
  decide     answer decision requests (a JSONL file of contexts with multiple-choice questions)
  bench      time single requests of a workload (latency percentiles, GEMM-only floor)
  logits     full next-token logits of a token sequence
  tokenize   token ids of a text
  serve      the decision APIs over HTTP (System One, OpenAI Decisions), batched in rounds
  bench-serve
             closed-loop HTTP clients against a running server: throughput and latency

`flide <command> --help` describes a command's options.
)";

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
};

constexpr Command kCommands[] = {
    {"decide", flide::cli::cmd_decide}, {"bench", flide::cli::cmd_bench},
    {"logits", flide::cli::cmd_logits}, {"tokenize", flide::cli::cmd_tokenize},
    {"serve", flide::cli::cmd_serve},   {"bench-serve", flide::cli::cmd_bench_serve},
};

}  // namespace

int main(int argc, char** argv) {
  using flide::cli::kExitOk;
  using flide::cli::kExitUsage;
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  for (const Command& command : kCommands) {
    if (args[0] != command.name) continue;
    try {
      return command.run({args.begin() + 1, args.end()});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flide: error: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "flide: error: unknown failure\n");
    }
    return kExitUsage;
  }
  std::fprintf(stderr, "flide: error: unknown command \"%s\"\n\n%s", args[0].c_str(), kUsage);
  return kExitUsage;
}
