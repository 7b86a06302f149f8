// `flide decide`: answers a JSONL file of decision requests, one Executor run per line, so each
// line's time is that request's latency. Lines are validated up front (which also tells whether
// the tokenizer is needed at all); a bad line is reported and answered with an error line, and
// never stops the others.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "decide_request.h"
#include "progress.h"
#include "server/http/json_body.h"
#include "server/routes/answers.h"

namespace flide::cli {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kUsage =
    R"(usage: flide decide (--model DIR | --config CONFIG.json) --input FILE.jsonl [options]

Answers decision requests: one JSON object per input line, either text
  {"id": ..., "context": "...",
   "questions": [{"id": ..., "question": "...", "options": ["...", ...], "answer": 0}]}
or token ids (no tokenizer needed)
  {"id": ..., "context_ids": [...],
   "questions": [{"id": ..., "ids": [...], "label_ids": [...], "answer": 0}]}
"id"s (string or integer) and "answer" (option index or null) are optional, unknown keys are
ignored, blank lines are skipped. Text questions use the OpenJev prompt with options lettered
A-Z then a-z (at most 52), each option shown as "[A] <option text>: ", and their probabilities
the checkpoint's decision calibration, as `flide serve` (config.json's; see --calibration).

Each input line gives one output line, in input order:
  {"id": ..., "questions": [{"id": ..., "probs": [...], "choice": i}],
   "tokens": {"trunk": n, "branches": m}, "ms": t}
(tokens: the shared context's tokens and the questions' own tokens; ms: the model run only).
A line that cannot be answered gives {"line": n, "id": ..., "error": "..."} instead (id null
when unreadable) and the same message on stderr; the other lines are still answered.

options:
  --model DIR         model directory (config.json, safetensors; tokenizer.json for text)
  --config FILE       instead of --model: random weights of a config.json's shapes (token-id
                      requests only; e.g. to compare devices on a real Qwen3.5 size)
  --seed N            random-weight seed with --config (default: 0)
  --input FILE        the requests (JSONL)
  --output FILE       where to write the answers (default: stdout)
  --device cpu|cuda   where to compute (default: cpu; cuda: GPU 0)
  --dtype f32|f64|bf16
                      compute type: f32 (default) or f64 on cpu, bf16 (the only one) on cuda
  --quantization fp8  cuda only: the fused products and two output projections on FP8 e4m3
                      operands (flide bench --help says which), as vLLM's --quantization fp8
  --mode fork|independent
                      fork: each context computed once, questions forked from it (default);
                      independent: each question run on its own (the reference)
  --threads N         CPU threads (default: all cores; cpu only)
  --graphs on|off     cuda: pad each request to its capacity bucket and replay one CUDA graph
                      per bucket (default: on); no effect on cpu
  --calibration FILE  decision temperatures instead of config.json's (flide serve --help)
  --help              this text

When questions carry answers, `accuracy: k/n = p% (mode, dtype)` is printed on stderr at the end.
Exit code: 0 every line answered, 1 some lines failed, 2 the command could not run.
)";

struct Entry {
  size_t line = 0;                       // 1-based line number in the input file
  json id;                               // for error lines; null when unreadable
  std::optional<DecideRequest> request;  // empty when the line is invalid
  std::string error;                     // why, when it is
};

struct Tally {
  size_t labelled = 0;
  size_t correct = 0;
};

std::vector<Entry> parse_lines(const std::string& text, int64_t vocab_size) {
  std::vector<Entry> entries;
  for (const auto& [number, line] : nonblank_lines(text)) {
    Entry entry;
    entry.line = number;
    try {
      const json parsed = json::parse(line);
      if (parsed.is_object() && parsed.contains("id") &&
          (parsed["id"].is_string() || parsed["id"].is_number_integer()))
        entry.id = parsed["id"];
      entry.request = parse_decide_request(parsed, vocab_size);
    } catch (const json::parse_error& e) {
      // nlohmann's own "line 1, column N" would read as a file line: keep only its reason.
      const std::string what = e.what();
      const size_t reason = what.find(": ");
      entry.error = cat("not valid JSON at column ", e.byte, ": ",
                        reason == std::string::npos ? what : what.substr(reason + 2));
    } catch (const json::out_of_range& e) {  // 406, a number such as 1e999
      entry.error = cat("a number too large for a double: ", server::untagged(e));
    } catch (const std::exception& e) {
      entry.error = e.what();
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

json answer_json(const DecideRequest& request, const Tree& tree, const TreeResult& result,
                 double ms) {
  FLIDE_CHECK(result.nodes.size() == tree.nodes.size());
  json questions = json::array();
  size_t branch_tokens = 0;
  for (size_t q = 0; q < request.questions.size(); ++q) {
    const std::vector<double>& probs =
        server::question_probs(result, q, tree.nodes[q + 1].label_ids.size());
    const size_t choice = server::argmax(probs);
    branch_tokens += tree.nodes[q + 1].tokens.size();
    questions.push_back({{"id", request.questions[q].id}, {"probs", probs}, {"choice", choice}});
  }
  return {{"id", request.id},
          {"questions", std::move(questions)},
          {"tokens", {{"trunk", tree.nodes[0].tokens.size()}, {"branches", branch_tokens}}},
          {"ms", ms}};
}

void count_correct(const DecideRequest& request, const json& answer, Tally& tally) {
  for (size_t q = 0; q < request.questions.size(); ++q) {
    if (!request.questions[q].answer) continue;
    ++tally.labelled;
    tally.correct += answer["questions"][q]["choice"] == *request.questions[q].answer;
  }
}

// Strings echo the caller's bytes and error messages may quote broken input: never throw on
// invalid UTF-8 while writing a line.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

int cmd_decide(const std::vector<std::string>& argv) {
  const Args args = Args::parse(argv, {{"model", true},
                                       {"config", true},
                                       {"seed", true},
                                       {"input", true},
                                       {"output", true},
                                       {"device", true},
                                       {"dtype", true},
                                       {"mode", true},
                                       {"threads", true},
                                       {"graphs", true},
                                       {"quantization", true},
                                       {"calibration", true},
                                       {"help", false}});
  if (args.has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  const ModelSource source = parse_model_source(args);
  const std::string input_path = args.required("input");
  const BackendChoice backend =
      parse_backend(args.value("device"), args.value("dtype"), args.value("threads"), false,
                    args.value("quantization"));
  const ExecMode mode = parse_mode(args.value("mode"));
  const bool graphs = parse_on_off(args.value("graphs"), "graphs");
  const std::string input = read_file(input_path);

  std::ofstream output_file;
  std::ostream* out = &std::cout;
  if (auto path = args.value("output")) {
    output_file = open_output(*path, "output");
    out = &output_file;
  }

  LoadedModel loaded = load_model_source(source, backend);
  const std::filesystem::path config_file =
      source.random ? source.path : source.path / "config.json";
  const DecisionCalibration calibration = load_calibration(
      read_json_object(config_file, cat(config_file)), config_file, args.value("calibration"));
  std::vector<Entry> entries = parse_lines(input, loaded.model->info().vocab_size);

  // Only text requests need the tokenizer; a model directory without one serves token ids.
  std::optional<Tokenizer> tokenizer;
  for (const Entry& entry : entries) {
    if (!entry.request || !entry.request->is_text) continue;
    if (source.random)
      throw Error(cat("line ", entry.line,
                      " is a text request; random weights (--config) take "
                      "token ids only"));
    const std::filesystem::path path = source.path / "tokenizer.json";
    if (!std::filesystem::exists(path))
      throw Error(
          cat(path, " not found; line ", entry.line, " is a text request and needs the tokenizer"));
    tokenizer.emplace(Tokenizer::load(path));
    break;
  }

  Executor executor(*loaded.model, graphs_policy(*loaded.ops, graphs));
  Progress progress(entries.size());
  const bool out_is_terminal = out == &std::cout && isatty(STDOUT_FILENO) == 1;
  Tally tally;
  size_t failed = 0;
  for (const Entry& entry : entries) {
    json line;
    std::string error = entry.error;
    if (entry.request) {
      try {
        const Tree tree =
            decide_tree(*entry.request, tokenizer ? &*tokenizer : nullptr, calibration);
        const auto start = std::chrono::steady_clock::now();
        const std::vector<TreeResult> results = executor.run({tree}, mode);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        line = answer_json(*entry.request, tree, results.at(0), ms);
        count_correct(*entry.request, line, tally);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (line.is_null()) {  // invalid line or failed run
      ++failed;
      progress.message(cat("flide: error: line ", entry.line, ": ", error));
      line = {{"line", entry.line}, {"id", entry.id}, {"error", error}};
    }
    if (out_is_terminal) progress.hide();
    *out << dump(line) << '\n' << std::flush;
    progress.advance();
  }
  progress.finish();
  if (!*out) throw Error("error while writing the answers");

  if (tally.labelled > 0)
    std::fprintf(stderr, "accuracy: %zu/%zu = %.1f%% (%s, %s)\n", tally.correct, tally.labelled,
                 100.0 * double(tally.correct) / double(tally.labelled),
                 std::string(mode_name(mode)).c_str(),
                 std::string(dtype_name(backend.dtype)).c_str());
  return failed > 0 ? kExitFailedRequests : kExitOk;
}

}  // namespace flide::cli
