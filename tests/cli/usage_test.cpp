// The flide command line itself: usage, help, and the mistakes that must end in a clear
// `flide: error:` and exit code 2 before any model is needed.
#include <gtest/gtest.h>

#include "cli_runner.h"

namespace flide::test {
namespace {

TEST(CliUsageTest, NoArgumentsPrintsUsageAndFails) {
  const CliResult r = run_flide("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("usage: flide <command>"), std::string::npos) << r.err;
}

TEST(CliUsageTest, HelpListsTheCommands) {
  const CliResult r = run_flide("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* command : {"decide", "logits", "tokenize"})
    EXPECT_NE(r.out.find(command), std::string::npos) << r.out;
}

TEST(CliUsageTest, EveryCommandHasHelp) {
  for (const std::string command : {"decide", "logits", "tokenize"}) {
    const CliResult r = run_flide(command + " --help");
    EXPECT_EQ(r.exit_code, 0) << command;
    EXPECT_EQ(r.out.rfind("usage: flide " + command, 0), 0u) << r.out;
  }
}

TEST(CliUsageTest, UnknownCommand) {
  const CliResult r = run_flide("frobnicate --model x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("flide: error: unknown command \"frobnicate\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("usage: flide"), std::string::npos) << r.err;
}

struct BadCommandLine {
  const char* args;
  const char* message;
};

TEST(CliUsageTest, FlagMistakesAreNamed) {
  const BadCommandLine cases[] = {
      {"decide --modle x", "unknown flag --modle"},
      {"decide --model", "--model needs a value"},
      {"decide --input x", "give exactly one of --model DIR and --config CONFIG.json"},
      {"decide --model m --model m", "--model given twice"},
      {"decide stray", "unexpected argument \"stray\""},
      {"logits --all=1 --model m --ids 1", "--all takes no value"},
      {"decide --model m --input x --threads 0", "--threads: \"0\" is not a thread count"},
      {"logits --model m --ids 1,x", "--ids: \"x\" is not a token id"},
      {"logits --model m --ids 1,,2", "--ids: \"\" is not a token id"},
      {"logits --model m --ids -3", "--ids: \"-3\" is not a token id"},
      {"tokenize --text hi", "give exactly one of --model DIR and --tokenizer FILE"},
  };
  for (const BadCommandLine& c : cases) {
    const CliResult r = run_flide(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_NE(r.err.find(std::string("flide: error: ") + c.message), std::string::npos)
        << c.args << "\n"
        << r.err;
  }
}

TEST(CliUsageTest, UnknownDtypeAndMode) {
  ScratchDir dir;
  const std::string input = shell_quote(dir.write("in.jsonl", "").string());
  CliResult r = run_flide("decide --model m --input " + input + " --dtype bf16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("flide: error: --dtype: unknown dtype \"bf16\""), std::string::npos)
      << r.err;
  r = run_flide("decide --model m --input " + input + " --mode=both");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("flide: error: --mode: unknown mode \"both\""), std::string::npos) << r.err;
  r = run_flide("logits --model m --ids 1 --dtype=f16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown dtype \"f16\""), std::string::npos) << r.err;
}

TEST(CliUsageTest, MissingModelDirectory) {
  ScratchDir dir;
  const std::string request =
      R"({"context_ids": [1], "questions": [{"ids": [2], "label_ids": [3, 4]}]})";
  const std::string input = shell_quote(dir.write("in.jsonl", request + "\n").string());
  const std::string missing = (dir.path() / "no_such_model").string();
  for (const std::string& args : {"decide --model " + shell_quote(missing) + " --input " + input,
                                  "logits --model " + shell_quote(missing) + " --ids 1,2"}) {
    const CliResult r = run_flide(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.signal, 0);
    EXPECT_NE(r.err.find("flide: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no_such_model"), std::string::npos) << r.err;
  }
}

TEST(CliUsageTest, MissingInputFile) {
  ScratchDir dir;
  const CliResult r =
      run_flide("decide --model m --input " + shell_quote((dir.path() / "absent.jsonl").string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("absent.jsonl"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flide::test
