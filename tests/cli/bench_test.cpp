// `flide bench`: a synthetic workload on random weights of a config's shapes, a FILE.jsonl
// workload on the shipped model, fork vs independent token counts, and the mistakes that must
// end in a clear error (unknown workload, text without a tokenizer, --device cuda on a CPU
// build, bf16 on the CPU) — for bench and for the --device/--dtype flags of decide and logits.
#include <gtest/gtest.h>

#include "cli_runner.h"

namespace flide::test {
namespace {

using nlohmann::json;

const std::string kGoldenConfig =
    shell_quote(std::string(FLIDE_SOURCE_DIR) + "/tests/data/golden_gqa/config.json");
const std::string kExamples =
    shell_quote(std::string(FLIDE_SOURCE_DIR) + "/examples/requests.jsonl");

json single_json_line(const CliResult& r) {
  const std::vector<json> lines = json_lines(r.out);
  EXPECT_EQ(lines.size(), 1u) << r.out;
  return lines.empty() ? json() : lines[0];
}

// Latencies and floors are positive and ordered; the floor is a part of the work.
void expect_sane_run(const json& run) {
  const double p10 = run["p10_ms"], median = run["median_ms"], p90 = run["p90_ms"];
  EXPECT_GT(p10, 0.0) << run.dump();
  EXPECT_LE(p10, median) << run.dump();
  EXPECT_LE(median, p90) << run.dump();
  EXPECT_GT(run["gemm_floor_ms"].get<double>(), 0.0) << run.dump();
  EXPECT_GT(run["gemm_gflop"].get<double>(), 0.0) << run.dump();
}

TEST(CliBenchTest, SyntheticWorkloadOnRandomWeights) {
  const CliResult r = run_flide("bench --config " + kGoldenConfig +
                                " --workload race_one --reps 2 --device cpu --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = single_json_line(r);
  EXPECT_EQ(out["workload"], "race_one");
  EXPECT_EQ(out["device"], "cpu");
  EXPECT_EQ(out["dtype"], "f32");
  EXPECT_EQ(out["batch_invariant"], false);
  EXPECT_EQ(out["random_weights"], true);
  EXPECT_EQ(out["trunk_tokens"], 450);
  EXPECT_EQ(out["branch_tokens"], 50);
  EXPECT_EQ(out["questions"], 1);
  EXPECT_EQ(out["reps"], 2);
  EXPECT_GT(out["params"].get<int64_t>(), 0);
  ASSERT_EQ(out["runs"].size(), 1u);
  EXPECT_EQ(out["runs"][0]["mode"], "fork");
  EXPECT_EQ(out["runs"][0]["tokens"], 500);
  expect_sane_run(out["runs"][0]);
}

TEST(CliBenchTest, BatchInvariantModeIsNamed) {
  const std::string bench =
      "bench --config " + kGoldenConfig +
      " --workload race_one --reps 1 --warmup 0 --threads 2 --batch-invariant";
  const CliResult json_run = run_flide(bench + " --json");
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  const json out = single_json_line(json_run);
  EXPECT_EQ(out["batch_invariant"], true);
  expect_sane_run(out["runs"][0]);
  const CliResult table = run_flide(bench);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("cpu f32 (2 threads), batch-invariant"), std::string::npos) << table.out;
}

TEST(CliBenchTest, TablePrintsEveryMode) {
  const CliResult r = run_flide("bench --config " + kGoldenConfig +
                                " --workload race_all --reps 1 --warmup 0 --mode both --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"race_all", "GEMM floor ms", "fork", "independent", "650", "2000",
                           "independent / fork: latency"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
}

TEST(CliBenchTest, ForkAndIndependentTokenCounts) {
  const CliResult r = run_flide("bench --config " + kGoldenConfig +
                                " --workload race_all --reps 1 --warmup 1 --mode both --json "
                                "--threads 2 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = single_json_line(r);
  ASSERT_EQ(out["runs"].size(), 2u);
  EXPECT_EQ(out["runs"][0]["tokens"], 450 + 4 * 50);    // trunk once
  EXPECT_EQ(out["runs"][1]["tokens"], 4 * (450 + 50));  // trunk per question
  for (const json& run : out["runs"]) expect_sane_run(run);
  // Independent runs the trunk's GEMMs four times.
  EXPECT_GT(out["runs"][1]["gemm_gflop"].get<double>(),
            2.5 * out["runs"][0]["gemm_gflop"].get<double>());
  EXPECT_NEAR(out["independent_over_fork_tokens"].get<double>(), 2000.0 / 650.0, 1e-9);
  EXPECT_GT(out["independent_over_fork_latency"].get<double>(), 0.0);
}

TEST(CliBenchTest, FileWorkloadOnTheShippedModel) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const CliResult r =
      run_flide("bench --model " + shell_quote(tiny_model_dir().string()) + " --workload " +
                kExamples + " --reps 2 --mode both --json --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = single_json_line(r);
  EXPECT_EQ(out["random_weights"], false);
  EXPECT_NE(out["workload"].get<std::string>().find("support-chat-1"), std::string::npos) << out;
  EXPECT_EQ(out["questions"], 3);  // the first line's questions
  const int64_t trunk = out["trunk_tokens"], branches = out["branch_tokens"];
  EXPECT_GT(trunk, 0);
  EXPECT_GE(branches, 3);
  ASSERT_EQ(out["runs"].size(), 2u);
  EXPECT_EQ(out["runs"][0]["tokens"], trunk + branches);
  EXPECT_EQ(out["runs"][1]["tokens"], 3 * trunk + branches);
  for (const json& run : out["runs"]) expect_sane_run(run);
}

// A file's round of N takes its first N lines, starting over after the last; the counts are the
// round's, all its requests together.
TEST(CliBenchTest, FileRoundTakesTheLinesInOrder) {
  const ScratchDir dir;
  std::string lines;
  for (int n : {20, 30, 40}) {  // a request of n context ids and n / 10 questions of 3 ids
    json request = {{"context_ids", json::array()}, {"questions", json::array()}};
    for (int t = 0; t < n; ++t) request["context_ids"].push_back(1 + t);
    for (int q = 0; q < n / 10; ++q)
      request["questions"].push_back({{"ids", {5, 6, 7 + q}}, {"label_ids", {8, 9}}});
    lines += request.dump() + "\n";
  }
  const std::string file = shell_quote(dir.write("rounds.jsonl", lines).string());
  struct Case {
    int batch;
    int64_t trunk, questions;
  };
  // 5 of 3 lines: 20, 30, 40, then 20 and 30 again.
  for (const Case& c : {Case{1, 20, 2}, Case{2, 50, 5}, Case{5, 140, 14}}) {
    const CliResult r =
        run_flide("bench --config " + kGoldenConfig + " --workload " + file + " --batch " +
                  std::to_string(c.batch) + " --reps 1 --warmup 0 --json --threads 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json out = single_json_line(r);
    EXPECT_EQ(out["trunk_tokens"], c.trunk) << c.batch;
    EXPECT_EQ(out["questions"], c.questions) << c.batch;
    EXPECT_EQ(out["branch_tokens"], 3 * c.questions) << c.batch;
    EXPECT_EQ(out["runs"][0]["tokens"], c.trunk + 3 * c.questions) << c.batch;
    if (c.batch > 1) {
      EXPECT_EQ(out["workload"],
                "rounds.jsonl (" + std::to_string(c.batch) + " requests from line 1)");
    }
  }
}

// --tokenizer gives a --config model the tokenizer a file's text requests need: the same
// tokens as the model directory's own.
TEST(CliBenchTest, TokenizerFlagReadsTextOnRandomWeights) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const std::string rest = " --workload " + kExamples +
                           " --batch 2 --reps 1 --warmup 0 --json "
                           "--threads 2";
  const CliResult by_dir =
      run_flide("bench --model " + shell_quote(tiny_model_dir().string()) + rest);
  const CliResult by_flag = run_flide(
      "bench --config " + shell_quote((tiny_model_dir() / "config.json").string()) +
      " --tokenizer " + shell_quote((tiny_model_dir() / "tokenizer.json").string()) + rest);
  ASSERT_EQ(by_dir.exit_code, 0) << by_dir.err;
  ASSERT_EQ(by_flag.exit_code, 0) << by_flag.err;
  const json a = single_json_line(by_dir), b = single_json_line(by_flag);
  EXPECT_EQ(b["random_weights"], true);
  for (const char* key : {"trunk_tokens", "branch_tokens", "questions"}) EXPECT_EQ(a[key], b[key]);
  EXPECT_GT(a["questions"].get<int64_t>(), 3);  // the second line's questions too
  EXPECT_EQ(b["runs"][0]["tokens"], a["runs"][0]["tokens"]);
}

// --batch N packs N requests into one round: N times the rows and GEMM work of one.
TEST(CliBenchTest, BatchPacksRequestsIntoOneRound) {
  const CliResult r = run_flide("bench --config " + kGoldenConfig +
                                " --workload race_one --reps 1 --warmup 0 --batch 3 --json "
                                "--threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = single_json_line(r);
  EXPECT_EQ(out["batch"], 3);
  ASSERT_EQ(out["runs"].size(), 1u);
  const json& run = out["runs"][0];
  EXPECT_EQ(run["tokens"], 3 * 500);
  expect_sane_run(run);
  EXPECT_DOUBLE_EQ(run["median_ms_per_request"].get<double>(), run["median_ms"].get<double>() / 3);
}

struct BadBench {
  std::string args;
  const char* message;
};

TEST(CliBenchTest, MistakesAreNamed) {
  const std::string cfg = "bench --config " + kGoldenConfig;
  const BadBench cases[] = {
      {cfg + " --workload race_some", "--workload: \"race_some\" is neither a workload"},
      {cfg, "--workload is required"},
      {"bench --workload race_one", "give exactly one of --model DIR and --config CONFIG.json"},
      {cfg + " --workload " + kExamples, "is a text request and needs a tokenizer"},
      {cfg + " --workload " + kExamples + " --tokenizer /nonexistent/tokenizer.json",
       "--tokenizer: \"/nonexistent/tokenizer.json\" is not a readable file"},
      {cfg + " --workload race_one --mode sideways", "--mode: unknown mode \"sideways\""},
      {cfg + " --workload race_one --reps 0", "--reps: \"0\" is not a count"},
      {cfg + " --workload race_one --batch 0", "--batch: \"0\" is not a count"},
      {cfg + " --workload race_one --seed -1", "--seed: \"-1\" is not a non-negative integer"},
      {cfg + " --workload race_one --device tpu", "--device: unknown device \"tpu\""},
      {cfg + " --workload race_one --dtype bf16", "bf16 needs --device cuda"},
      {cfg + " --workload race_one --device cuda --dtype f64",
       "unknown dtype \"f64\" for --device cuda"},
      {cfg + " --workload race_one --quantization fp8",
       "--quantization fp8: the FP8 products run on the CUDA backend only (--device cuda)"},
      {cfg + " --workload race_one --device cuda --quantization int4",
       "--quantization: unknown method \"int4\" (fp8)"},
      {"bench --config " + shell_quote(FLIDE_SOURCE_DIR) + " --workload race_one",
       "is a directory; give the config.json file"},
  };
  for (const BadBench& c : cases) {
    const CliResult r = run_flide(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_EQ(r.signal, 0) << c.args;
    EXPECT_EQ(r.err.rfind("flide: error: ", 0), 0u) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

TEST(CliBenchTest, HelpDescribesTheWorkloads) {
  const CliResult r = run_flide("bench --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("usage: flide bench", 0), 0u) << r.out;
  for (const char* name : {"race_all", "race_one", "quality_all", "quality_one", "multirc_all"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
}

// --device cuda: a clear error on a CPU build (or without a GPU); a sane result where CUDA runs.
TEST(CliBenchTest, CudaDeviceRunsOrSaysWhyNot) {
  const CliResult r = run_flide("bench --config " + kGoldenConfig +
                                " --workload race_one --reps 2 --device cuda --json");
  if (r.exit_code == 0) {
    const json out = single_json_line(r);
    EXPECT_EQ(out["device"], "cuda");
    EXPECT_EQ(out["dtype"], "bf16");
    expect_sane_run(out["runs"][0]);
    return;
  }
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.err.find("flide: error: --device cuda: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CUDA"), std::string::npos) << r.err;
}

TEST(CliBenchTest, DecideAndLogitsTakeTheDevice) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const std::string model = shell_quote(tiny_model_dir().string());
  CliResult r = run_flide("logits --model " + model + " --ids 1,2 --dtype bf16");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bf16 needs --device cuda"), std::string::npos) << r.err;
  r = run_flide("decide --model " + model + " --input " + kExamples + " --device gpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--device: unknown device \"gpu\" (cpu or cuda)"), std::string::npos)
      << r.err;
  r = run_flide("logits --model " + model + " --ids 1,2 --device cpu --threads 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_flide("decide --model " + model + " --input " + kExamples + " --device cuda");
  if (r.exit_code != 0) {  // a CPU build, or no GPU
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("flide: error: --device cuda: "), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace flide::test
