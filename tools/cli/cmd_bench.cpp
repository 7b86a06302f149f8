// `flide bench`: the latency of one workload (workloads.h), forked or independent,
// on a real checkpoint or on random weights of a config's shapes, next to its GEMM-only floor:
// the time of just the matrix products the same forward performs (Model::gemm_shapes), replayed
// through Ops::matmul on random data. The gap between the two is what attention, Gated
// DeltaNet, norms and launch overheads cost on top of the unavoidable GEMMs.
// --batch N times N such requests (distinct random ids, so distinct trunks) in one round, as
// the server packs concurrent requests: the throughput side of the same forward.
//
// Timing: every round is one Executor::run followed by Ops::synchronize, on a steady clock;
// warm-up rounds first (allocation, caches, lazy initialisation), then --reps timed rounds,
// summarised by median and p10/p90 (linear interpolation between order statistics).
// --profile (cuda) adds one round per mode after the timed ones, with the backend's per-op
// event timing on (backend/cuda/profiler.h), and prints its table to stderr; that round is in
// none of the timings. --replay-ops MS (cuda) adds one more round with each op captured into a
// CUDA graph of its own, then launches each op's graphs alone, about MS ms each
// (Ops::replay_ops), and reports each window on the steady clock, for bench/energy_by_op.py to
// split the GPU's joules by op.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "model/random_weights.h"
#include "workloads.h"

namespace flide::cli {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    R"(usage: flide bench (--model DIR | --config CONFIG.json) --workload W [options]

Times decision requests and prints tokens computed, the median, p10 and p90 latency, and
the GEMM-only floor: the time of just the matrix products that forward performs.

workloads (synthetic: random token ids, fixed shapes; labels read at each question's end):
  race_all      trunk 450 + 4 questions x 50 tokens, 4 labels
  race_one      trunk 450 + 1 question x 50 tokens, 4 labels
  quality_all   trunk 5000 + 18 questions x 70 tokens, 4 labels
  quality_one   trunk 5000 + 1 question x 70 tokens, 4 labels
  multirc_all   trunk 330 + 58 questions x 35 tokens, 2 labels
  FILE.jsonl    the file's requests (`flide decide` input: text through the decision
                template with the tokenizer, or token ids); a round of --batch N takes the
                first N lines, starting over after the last

options:
  --model DIR         model directory (config.json, safetensors; tokenizer.json for text)
  --config FILE       a config.json: random weights of its shapes (e.g.
                      ../shared/configs/qwen3_5_9b.json); every size without downloading it
  --tokenizer FILE    the tokenizer.json for a FILE.jsonl's text requests (default:
                      DIR/tokenizer.json; with --config, e.g.
                      ../shared/data/tokenizers/qwen2/tokenizer.json)
  --workload W        one of the above
  --device cpu|cuda   where to compute (default: cpu; cuda: GPU 0)
  --dtype f32|f64|bf16
                      compute type: f32 (default) or f64 on cpu, bf16 (the only one) on cuda
  --mode fork|independent|both
                      fork: context once, questions forked (default); independent: each
                      question on its own; both: one after the other, with their ratio
  --batch N           N requests of the workload in one round (default: 1), as the server
                      packs N concurrent requests (synthetic ones with their own random ids,
                      seeds seed .. seed+N-1); times are per round, plus ms per request, and
                      the token and question counts are the round's, its requests together
  --reps N            timed rounds (default: 20)
  --warmup N          untimed rounds first (default: 3)
  --seed N            random weights and synthetic token ids (default: 0)
  --threads N         CPU threads (default: all cores; cpu only)
  --graphs on|off|both
                      cuda: pad the request to its capacity bucket and replay one CUDA graph
                      per bucket (default: on); both: time each mode without and with graphs
                      (no effect on cpu, which has no graphs)
  --quantization fp8  cuda only: the fused products (MLP gate/up, GDN q/k/v and z, attention
                      q/k/v) on FP8 e4m3 operands with per-row scales, as vLLM's
                      --quantization fp8; the MLP's down and the GDN out projections on FP8
                      blocks (a scale per 128 values); the attention's output projection
                      and the LM head stay bf16
  --batch-invariant   the serving mode whose results do not depend on the round's other
                      requests (flide serve --batch-invariant), to time what it costs
  --json              one JSON line instead of the table
  --profile           cuda only: one more round per mode after the timed ones, with per-op
                      GPU timing (time per op, GEMM shapes, GPU idle between ops); its table
                      goes to stderr, and the timings above do not include it
  --replay-ops MS     cuda only: one more round per mode after the timed ones, each op captured
                      into a CUDA graph of its own; then each op's graphs launched again and
                      again alone, about MS ms per op (first the GPU idle as long, last all
                      ops in turn); prints each window (steady-clock seconds) for
                      bench/energy_by_op.py, which samples the GPU's energy beside it
  --help              this text
)";

constexpr int64_t kFloorWeightBudget = int64_t(4) << 30;  // bytes of distinct GEMM weights

std::vector<ExecMode> parse_modes(const std::optional<std::string>& value) {
  if (value && *value == "both") return {ExecMode::ExecMode_fork, ExecMode::ExecMode_independent};
  try {
    return {parse_mode(value)};
  } catch (const Error&) {
    throw Error(cat("--mode: unknown mode \"", *value, "\" (fork, independent or both)"));
  }
}

// --graphs on (default) | off | both: the graph settings to time, in order.
std::vector<bool> parse_graph_settings(const std::optional<std::string>& value) {
  if (!value || *value == "on") return {true};
  if (*value == "off") return {false};
  if (*value == "both") return {false, true};
  throw Error(cat("--graphs: unknown setting \"", *value, "\" (on, off or both)"));
}

struct Summary {
  double median = 0, p10 = 0, p90 = 0;
};

// Quantile q of the samples, interpolating linearly between order statistics.
Summary summarize(std::vector<double> ms) {
  FLIDE_CHECK(!ms.empty());
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    const double pos = q * double(ms.size() - 1);
    const size_t lo = size_t(pos);
    const size_t hi = std::min(lo + 1, ms.size() - 1);
    return ms[lo] + (pos - double(lo)) * (ms[hi] - ms[lo]);
  };
  return {at(0.5), at(0.1), at(0.9)};
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The model, with the GEMM shapes of the rounds it computes while `recording`.
class GemmRecorder final : public ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  void submit(const Stream& stream) override {
    if (recording) {
      std::vector<GemmShape> round = inner_.gemm_shapes(stream);
      shapes.insert(shapes.end(), round.begin(), round.end());
    }
    inner_.submit(stream);
  }

  bool recording = false;
  std::vector<GemmShape> shapes;
};

struct ModeResult {
  ExecMode mode;
  bool graphs = false;
  int64_t tokens = 0;   // stream rows of one round
  int64_t padding = 0;  // padding rows of its round (graphs: up to the capacity bucket)
  Summary latency;      // ms
  std::vector<GemmShape> gemms;
  Summary floor;  // ms
  double gemm_flop = 0;
  std::string profile;                // the backend's report of the profiled round (--profile)
  std::vector<Ops::OpReplay> replay;  // --replay-ops's windows
};

ModeResult time_mode(Model& model, Ops& ops, const std::vector<Tree>& trees, ExecMode mode,
                     bool graphs, int warmup, int reps, bool profile, int replay_ms) {
  ModeResult result;
  result.mode = mode;
  GemmRecorder recorder(model);
  // The floor's GEMMs are those of the unpadded round (the same token count as the request);
  // an unpadded round never runs as a graph.
  recorder.recording = true;
  Executor(recorder).run(trees, mode);
  recorder.recording = false;
  const RoundPolicy policy = graphs_policy(ops, graphs);
  result.graphs = policy.pad_to_buckets;
  Executor executor(recorder, policy);
  std::vector<double> ms;
  for (int round = 0; round < warmup + reps; ++round) {
    RunStats stats;
    ops.synchronize();
    const Clock::time_point start = Clock::now();
    executor.run(trees, mode, &stats);
    ops.synchronize();
    const double elapsed = ms_since(start);
    if (round >= warmup) ms.push_back(elapsed);
    result.tokens = stats.tokens_computed;
    result.padding = stats.tokens_padding;
  }
  if (replay_ms > 0) {  // one more round, untimed, each op captured into a graph of its own
    ops.synchronize();
    ops.set_op_capture(true);
    executor.run(trees, mode, nullptr);
    ops.synchronize();
    ops.set_op_capture(false);
    result.replay = ops.replay_ops(replay_ms / 1e3);
  }
  if (profile) {  // one more round, untimed, with per-op events (eager: graphs hide ops)
    ops.synchronize();
    ops.set_profiling(false);  // turning it on starts a fresh profile
    ops.set_profiling(true);
    executor.run(trees, mode, nullptr);
    ops.synchronize();
    result.profile = ops.profile_report();
    ops.set_profiling(false);
  }
  result.latency = summarize(ms);
  result.gemms = std::move(recorder.shapes);
  for (const GemmShape& g : result.gemms) result.gemm_flop += 2.0 * double(g.m * g.n) * double(g.k);
  return result;
}

// Replays a forward's GEMMs on random data. Each call gets its own weight matrix, as in the
// model, so that small models cannot serve weights from cache across layers; past
// kFloorWeightBudget bytes, calls of one shape share matrices round-robin (reuse distance still
// far beyond any cache). Weights persist, so fork and independent replay the same ones.
class GemmFloor {
 public:
  GemmFloor(Ops& ops, uint64_t seed) : ops_(ops), seed_(seed) {}

  Summary time(const std::vector<GemmShape>& gemms, int warmup, int reps) {
    ops_.reset_scratch();  // the model is done with its round
    int64_t x_elems = 1, out_elems = 1;
    for (const GemmShape& g : gemms) {
      x_elems = std::max(x_elems, g.m * g.k);
      out_elems = std::max(out_elems, g.m * g.n);
    }
    const View x = ops_.scratch(1, x_elems), out = ops_.scratch(1, out_elems);
    upload_random(x, random_tensor_key(seed_, "gemm_floor.x"));
    std::vector<View> weights;
    for (size_t i = 0; i < gemms.size(); ++i) weights.push_back(weight(i, gemms[i]));

    std::vector<double> ms;
    for (int round = 0; round < std::max(warmup, 1) + reps; ++round) {
      ops_.synchronize();
      const Clock::time_point start = Clock::now();
      for (size_t i = 0; i < gemms.size(); ++i) {
        const GemmShape& g = gemms[i];
        ops_.matmul({x.data, g.m, g.k, x.dtype}, weights[i], {out.data, g.m, g.n, out.dtype});
      }
      ops_.synchronize();
      const double elapsed = ms_since(start);
      if (round >= std::max(warmup, 1)) ms.push_back(elapsed);
    }
    return summarize(ms);
  }

 private:
  View weight(size_t call, const GemmShape& g) {
    if (call < by_call_.size() && by_call_[call].rows == g.n && by_call_[call].cols == g.k)
      return by_call_[call];
    std::vector<View>& same = by_shape_[{g.n, g.k}];
    const int64_t bytes = g.n * g.k * int64_t(dtype_size(ops_.dtype()));
    View w;
    if (same.empty() || bytes_ + bytes <= kFloorWeightBudget) {
      w = ops_.alloc(g.n, g.k);
      upload_random(w, random_tensor_key(seed_, cat("gemm_floor.w", call)));
      bytes_ += bytes;
      same.push_back(w);
    } else {
      w = same[next_[{g.n, g.k}]++ % same.size()];
    }
    if (by_call_.size() <= call) by_call_.resize(call + 1);
    by_call_[call] = w;
    return w;
  }

  void upload_random(View dst, uint64_t key) {
    if (dst.size() > host_size_) {
      host_.reset(new float[size_t(dst.size())]);
      host_size_ = dst.size();
    }
    // Unit-gain values, like the model's activations and weights (zeros would flatter GPU
    // GEMMs: less switching, less power).
    fill_uniform(host_.get(), dst.size(), key, 0.0f, 1.0f);
    ops_.upload(dst, host_.get());
  }

  Ops& ops_;
  uint64_t seed_;
  std::vector<View> by_call_;
  std::map<std::pair<int64_t, int64_t>, std::vector<View>> by_shape_;  // (n, k) -> weights
  std::map<std::pair<int64_t, int64_t>, size_t> next_;
  int64_t bytes_ = 0;
  std::unique_ptr<float[]> host_;
  int64_t host_size_ = 0;
};

std::string format_params(int64_t n) {
  char text[32];
  if (n >= 1000000000)
    std::snprintf(text, sizeof text, "%.2fB", double(n) / 1e9);
  else
    std::snprintf(text, sizeof text, "%.2fM", double(n) / 1e6);
  return text;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  const Args args = Args::parse(argv, {{"model", true},
                                       {"config", true},
                                       {"tokenizer", true},
                                       {"workload", true},
                                       {"device", true},
                                       {"dtype", true},
                                       {"mode", true},
                                       {"batch", true},
                                       {"reps", true},
                                       {"warmup", true},
                                       {"seed", true},
                                       {"threads", true},
                                       {"graphs", true},
                                       {"batch-invariant", false},
                                       {"quantization", true},
                                       {"json", false},
                                       {"profile", false},
                                       {"replay-ops", true},
                                       {"help", false}});
  if (args.has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  // Everything the user typed is checked before a (possibly many-GB) model is loaded.
  const ModelSource source = parse_model_source(args);
  const WorkloadSpec spec = parse_workload(args.required("workload"));
  std::optional<std::filesystem::path> tokenizer_json;
  if (args.has("tokenizer")) {
    tokenizer_json = args.required("tokenizer");
    if (!std::filesystem::is_regular_file(*tokenizer_json))
      throw Error(cat("--tokenizer: ", *tokenizer_json, " is not a readable file"));
  } else if (!source.random) {
    tokenizer_json = source.path / "tokenizer.json";
  }
  const BackendChoice backend =
      parse_backend(args.value("device"), args.value("dtype"), args.value("threads"),
                    args.has("batch-invariant"), args.value("quantization"));
  const std::vector<ExecMode> modes = parse_modes(args.value("mode"));
  std::vector<bool> graph_settings = parse_graph_settings(args.value("graphs"));
  const int64_t batch = parse_count(args.value("batch"), "batch", 1, 1, 4096);
  const int reps = parse_count(args.value("reps"), "reps", 20, 1);
  const int warmup = parse_count(args.value("warmup"), "warmup", 3, 0);
  const uint64_t seed = source.seed;
  const bool as_json = args.has("json");
  const bool profile = args.has("profile");
  if (profile && backend.device != Device::Device_cuda)
    throw Error("--profile times the CUDA backend's ops: it needs --device cuda");
  const int replay_ms = parse_count(args.value("replay-ops"), "replay-ops", 0, 1, 600000);
  if (replay_ms > 0 && backend.device != Device::Device_cuda)
    throw Error("--replay-ops replays the CUDA backend's ops as graphs: it needs --device cuda");

  const bool random = source.random;
  const Clock::time_point load_start = Clock::now();
  LoadedModel loaded = load_model_source(source, backend);
  loaded.ops->synchronize();
  const double load_s = ms_since(load_start) / 1e3;
  const ModelInfo& info = loaded.model->info();
  const BenchRound round = make_round(spec, batch, info.vocab_size, seed, tokenizer_json);

  if (!loaded.ops->set_graphs(true)) graph_settings = {false};  // a backend without graphs
  std::vector<ModeResult> results;
  for (ExecMode mode : modes)
    for (bool graphs : graph_settings)
      results.push_back(time_mode(*loaded.model, *loaded.ops, round.trees, mode, graphs, warmup,
                                  reps, profile && graphs == graph_settings.front(), replay_ms));
  GemmFloor floor(*loaded.ops, seed);
  for (ModeResult& r : results) r.floor = floor.time(r.gemms, warmup, reps);
  // Ratios of the last setting timed (graphs on when timed): independent over fork.
  const ModeResult* fork = nullptr;
  const ModeResult* indep = nullptr;
  for (const ModeResult& r : results) (r.mode == ExecMode::ExecMode_fork ? fork : indep) = &r;
  const bool both = fork && indep;
  const double latency_ratio = both ? indep->latency.median / fork->latency.median : 0;
  const double token_ratio = both ? double(indep->tokens) / double(fork->tokens) : 0;
  // Profiles go to stderr, after the results (stdout flushed first, for a shared terminal).
  const auto print_profiles = [&] {
    if (!profile) return;
    std::fflush(stdout);
    for (const ModeResult& r : results)
      std::fprintf(stderr,
                   "\nprofile: one extra %s round after the timed ones (median %.3f ms; this "
                   "round is not in the timings)\n%s",
                   std::string(mode_name(r.mode)).c_str(), r.latency.median, r.profile.c_str());
  };

  if (as_json) {
    json runs = json::array();
    for (const ModeResult& r : results)
      runs.push_back({{"mode", mode_name(r.mode)},
                      {"graphs", r.graphs},
                      {"tokens", r.tokens},
                      {"padding_tokens", r.padding},
                      {"median_ms", r.latency.median},
                      {"median_ms_per_request", r.latency.median / double(batch)},
                      {"p10_ms", r.latency.p10},
                      {"p90_ms", r.latency.p90},
                      {"gemm_floor_ms", r.floor.median},
                      {"gemm_gflop", r.gemm_flop / 1e9}});
    if (replay_ms > 0)
      for (size_t i = 0; i < results.size(); ++i) {
        json windows = json::array();
        for (const Ops::OpReplay& w : results[i].replay)
          windows.push_back({{"op", w.op},
                             {"graphs_per_round", w.graphs_per_round},
                             {"rounds", w.rounds},
                             {"t0", w.t0},
                             {"t1", w.t1}});
        runs[i]["replay"] = std::move(windows);
      }
    json out = {
        {"workload", round.description},
        {"model", source.path.string()},
        {"random_weights", random},
        {"params", info.n_params},
        {"load_s", load_s},
        {"device", device_name(backend.device)},
        {"dtype", dtype_name(backend.dtype)},
        {"batch_invariant", backend.batch_invariant},
        {"quantization", backend.quantization == Quantization::Quantization_fp8 ? "fp8" : "none"}};
    if (backend.device == Device::Device_cpu) out["threads"] = backend.threads;
    out["seed"] = seed;
    out["trunk_tokens"] = round.trunk_tokens;
    out["branch_tokens"] = round.branch_tokens;
    out["questions"] = round.questions;
    out["batch"] = batch;
    out["warmup"] = warmup;
    out["reps"] = reps;
    out["runs"] = std::move(runs);
    if (both) {
      out["independent_over_fork_latency"] = latency_ratio;
      out["independent_over_fork_tokens"] = token_ratio;
    }
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
    std::cout.flush();
    print_profiles();
    return kExitOk;
  }

  std::printf("workload %s: %s%" PRId64 " + %" PRId64 " questions (%" PRId64 " tokens); %s\n",
              round.description.c_str(),
              batch > 1 ? cat(batch, " requests, trunks ").c_str() : "trunk ", round.trunk_tokens,
              round.questions, round.branch_tokens, backend_description(backend).c_str());
  std::printf("model %s%s: %s parameters, %" PRId64
              " layers, loaded in %.1f s; %d reps after %d "
              "warm-up\n",
              source.path.c_str(), random ? cat(" (random weights, seed ", seed, ")").c_str() : "",
              format_params(info.n_params).c_str(), info.n_layers, load_s, reps, warmup);
  std::printf("%-12s %-6s %8s %8s %11s %9s %9s %15s %13s\n", "mode", "graphs", "tokens", "padding",
              "median ms", "p10 ms", "p90 ms", "GEMM floor ms", "GEMM TFLOP/s");
  for (const ModeResult& r : results)
    std::printf("%-12s %-6s %8" PRId64 " %8" PRId64 " %11.3f %9.3f %9.3f %15.3f %13.3f\n",
                std::string(mode_name(r.mode)).c_str(), r.graphs ? "on" : "off", r.tokens,
                r.padding, r.latency.median, r.latency.p10, r.latency.p90, r.floor.median,
                r.floor.median > 0 ? r.gemm_flop / (r.floor.median * 1e-3) / 1e12 : 0.0);
  if (batch > 1)
    for (const ModeResult& r : results)
      std::printf("%s, graphs %s: %" PRId64 " requests per round, %.3f ms per request\n",
                  std::string(mode_name(r.mode)).c_str(), r.graphs ? "on" : "off", batch,
                  r.latency.median / double(batch));
  if (both)
    std::printf("independent / fork: latency %.2fx, tokens %.2fx\n", latency_ratio, token_ratio);
  for (const ModeResult& r : results) {
    if (replay_ms == 0 || r.replay.empty()) continue;
    std::printf(
        "\n%s round, each op's graphs replayed alone (steady-clock windows):\n%-24s %7s "
        "%8s %12s %16s %16s\n",
        std::string(mode_name(r.mode)).c_str(), "op", "graphs", "rounds", "ms a round", "t0 s",
        "t1 s");
    for (const Ops::OpReplay& w : r.replay)
      std::printf("%-24s %7" PRId64 " %8" PRId64 " %12.4f %16.4f %16.4f\n", w.op.c_str(),
                  w.graphs_per_round, w.rounds,
                  w.rounds ? (w.t1 - w.t0) * 1e3 / double(w.rounds) : 0.0, w.t0, w.t1);
  }
  print_profiles();
  return kExitOk;
}

}  // namespace flide::cli
