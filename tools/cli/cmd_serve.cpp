// `flide serve`: the decision APIs over HTTP (server/http). It binds and starts answering first
// (503 until ready, so /health tells when the model is in), loads the tokenizer and the model on
// a loader thread, then hands the routes a ServingModel. SIGINT and SIGTERM are taken by the main
// thread (blocked everywhere else), which stops cleanly: new requests get 503, the admitted ones
// are answered, the HTTP threads are joined (within a bound; a second signal exits at once).
// A signal during the load exits at once: there is nothing to finish yet.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "engine/decision_prompt.h"
#include "engine/warmup.h"
#include "server/http/http_server.h"
#include "tokenizer/tokenizer.h"

namespace flide::cli {

namespace {

using server::EngineLoop;
using server::EngineOptions;
using server::HttpOptions;
using server::HttpServer;
using server::Metrics;
using server::RouteLimits;
using server::ServingModel;

constexpr const char* kUsage =
    R"(usage: flide serve (--model DIR | --config CONFIG.json --tokenizer FILE) [options]

Serves decision requests over HTTP:
  POST /v1/systemone   System One (TypeSafe / llama.cpp format)
  POST /v1/decisions   OpenAI's Decisions API (client.decisions.create)
  GET  /v1/models, GET /health (503 while loading), GET /metrics (Prometheus)
  POST /tokenize, POST /detokenize (llama.cpp's "content" or vLLM's "prompt")
Waiting requests are packed into rounds of up to --round-tokens tokens; requests arriving while
a round runs join the next one. Prints `flide serve: listening on http://HOST:PORT` on stdout.

options:
  --model DIR           model directory (config.json, safetensors, tokenizer.json)
  --config FILE         instead of --model: random weights of a config.json's shapes (e.g.
                        ../shared/configs/qwen3_5_0_8b.json), with --tokenizer
  --tokenizer FILE      the tokenizer.json (default: DIR/tokenizer.json)
  --seed N              random-weight seed with --config (default: 0)
  --host ADDR           address to listen on (default: 127.0.0.1, this machine only)
  --port N              port (default: 8000; 0: any free port)
  --device cpu|cuda     where to compute (default: cpu; cuda: GPU 0)
  --dtype f32|f64|bf16  f32 (default) or f64 on cpu, bf16 (the only one) on cuda
  --threads N           CPU threads for the model (default: all cores; cpu only)
  --graphs on|off       cuda: pad each round to its capacity bucket and replay one CUDA graph
                        per bucket (default: on); no effect on cpu
  --overlap-rounds on|off
                        cuda: form the next round while the running one is in its last
                        layers, and render its answers while the next computes, so the GPU
                        does not wait for the host between rounds (default: on)
  --balance-rounds on|off
                        with overlapped rounds: a round formed while another runs takes at
                        most half of the requests waiting and running, so that steady clients
                        settle into rounds of equal size, not a small and a large one in turn
                        (default: on)
  --quantization fp8    cuda only: the fused products and two output projections on FP8 e4m3
                        operands (flide bench --help says which), as vLLM's --quantization fp8
  --batch-invariant     a request's answers do not depend on what else shares its round
                        (server load), bit for bit; small rounds run slower (cuda: under
                        2,048 token rows)
  --mode fork|independent
                        fork: each context once, questions forked from it (default);
                        independent: every question as its own prompt (the reference)
  --served-model-name NAME[,NAME...]
                        the model's names: /v1/decisions accepts any of them, responses and
                        /v1/models report the first (default: the --model folder's name, or
                        the --config file's without .json)
  --allowed-origins LIST
                        origins whose browser pages may call the server (CORS): "*" (any;
                        default, as vLLM, SGLang and llama.cpp), "none", or comma-separated
                        http(s)://host[:port] origins
  --api-key KEY         require `Authorization: Bearer KEY` (401 otherwise); /health and
                        /v1/models stay open, as in llama.cpp
  --max-queue N         admitted requests waiting for a round; more get 429 (default: 128)
  --max-questions N     questions per request; more get 413 (default: 400, the most
                        /v1/decisions' schema allows)
  --max-prompt-tokens N rendered prompt tokens per request, over all questions, before prefix
                        sharing; more get 413 (default: 0, unlimited)
  --max-context-tokens N
                        one question's whole prompt; longer gets 400 (default: the model's
                        max_position_embeddings)
  --max-body-bytes N    request body size; larger gets 413 (default: 4194304)
  --calibration FILE    the decision temperatures to use instead of config.json's: a JSON
                        object with "decision_calibration" ({"temperature": {"choice": T,
                        "noul.2": T, ...}, "noul_bias": B}) and/or vLLM's
                        "decision_temperature" (default: config.json's; none: T = 1)
  --round-tokens N      token rows per engine round; a larger request runs alone
                        (default: 65536)
  --warmup on|off       before /health answers 200, run a synthetic round of --round-tokens
                        rows and a small one, so that the first requests do not pay for
                        loading kernels, growing buffers and capturing a graph, and a round of
                        that size is known to fit (default: on with --device cuda, off on cpu)
  --access-log on|off   a line on stderr for every answered request: client, method and
                        path, status, time (default: on)
  --help                this text
)";

// The names the model answers to, the first reported in responses: --served-model-name's
// (comma-separated, as vLLM's space-separated list), or the checkpoint folder's or the config
// file's name.
std::vector<std::string> served_model_names(const std::optional<std::string>& flag,
                                            const ModelSource& source) {
  if (!flag) {
    const std::filesystem::path path = source.path.lexically_normal();
    if (source.random) return {path.stem().string()};
    return {path.has_filename() ? path.filename().string()
                                : path.parent_path().filename().string()};
  }
  std::vector<std::string> names;
  for (const std::string& name : split_list(*flag)) {
    if (name.empty()) throw Error(cat("--served-model-name: \"", *flag, "\" has an empty name"));
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw Error(cat("--served-model-name: \"", name, "\" is given twice"));
    names.push_back(name);
  }
  return names;
}

// max_position_embeddings of the text model (top level or text_config), 0 when absent.
int64_t max_model_len(const nlohmann::json& config) {
  const nlohmann::json& text = config.contains("text_config") ? config["text_config"] : config;
  return text.value("max_position_embeddings", int64_t(0));
}

// Everything the load builds, owned together; the engine is declared last (stopped first).
struct Served {
  LoadedModel loaded;
  std::optional<Tokenizer> tokenizer;
  std::unique_ptr<ServingModel> serving;
  std::unique_ptr<EngineLoop> engine;
};

// Admission closes (503) and the admitted requests are answered; then the HTTP threads finish
// their connections. A client trickling bytes would hold that forever (httplib's read timeout
// restarts with each byte), so connections get kDrainSeconds, and a second SIGINT or SIGTERM ends
// the process at once, as a second Ctrl-C does llama.cpp's server and uvicorn (status 1: accepted
// work may have been cut). Returns `status`, or exits with it when the bound runs out.
int drain(EngineLoop* engine, HttpServer& http, const sigset_t& stop_signals, int status) {
  constexpr int kDrainSeconds = 10;
  std::atomic<bool> engine_stopped{false}, drained{false};
  std::thread stopper([&] {
    if (engine) engine->stop();
    engine_stopped = true;
    http.stop();
    drained = true;
  });
  std::optional<std::chrono::steady_clock::time_point> deadline;
  while (!drained) {
    const timespec tick{0, 50 * 1000 * 1000};
    const int signal = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal == SIGINT || signal == SIGTERM) {
      std::fprintf(stderr, "flide serve: second signal, exiting now\n");
      std::fflush(stderr);
      std::_Exit(kExitFailedRequests);
    }
    if (engine_stopped && !deadline)
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kDrainSeconds);
    if (deadline && std::chrono::steady_clock::now() > *deadline) {
      std::fprintf(stderr, "flide serve: connections still open after %d s, exiting\n",
                   kDrainSeconds);
      std::fflush(stderr);
      std::_Exit(status);
    }
  }
  stopper.join();
  return status;
}

// engine/warmup.h, with a failure that says what to change.
void warm_up_to_serve(Model& model, const EngineOptions& options, int64_t max_context) {
  WarmupReport w;
  try {
    w = warm_up(model, options.policy, options.mode,
                {options.round_tokens, max_context, model.info().vocab_size});
  } catch (const std::exception& e) {
    throw Error(cat("the warm-up round of ", options.round_tokens,
                    " token rows failed (lower --round-tokens, or --warmup off): ", e.what()));
  }
  std::fprintf(stderr,
               "flide serve: warmed up in %.1f s: a round of %" PRId64
               " token rows, then one of %" PRId64 " twice\n",
               w.seconds, w.full_round_rows, w.small_round_rows);
}

}  // namespace

int cmd_serve(const std::vector<std::string>& argv) {
  const Args args = Args::parse(argv, {{"model", true},
                                       {"config", true},
                                       {"tokenizer", true},
                                       {"seed", true},
                                       {"host", true},
                                       {"port", true},
                                       {"device", true},
                                       {"dtype", true},
                                       {"threads", true},
                                       {"mode", true},
                                       {"api-key", true},
                                       {"served-model-name", true},
                                       {"allowed-origins", true},
                                       {"access-log", true},
                                       {"max-queue", true},
                                       {"max-questions", true},
                                       {"max-prompt-tokens", true},
                                       {"max-context-tokens", true},
                                       {"max-body-bytes", true},
                                       {"round-tokens", true},
                                       {"warmup", true},
                                       {"graphs", true},
                                       {"overlap-rounds", true},
                                       {"balance-rounds", true},
                                       {"batch-invariant", false},
                                       {"quantization", true},
                                       {"calibration", true},
                                       {"help", false}});
  if (args.has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  // Everything the user typed is checked before binding a port or loading anything.
  const ModelSource source = parse_model_source(args);
  const std::vector<std::string> model_names =
      served_model_names(args.value("served-model-name"), source);
  const BackendChoice backend =
      parse_backend(args.value("device"), args.value("dtype"), args.value("threads"),
                    args.has("batch-invariant"), args.value("quantization"));
  const std::filesystem::path config_file =
      source.random ? source.path : source.path / "config.json";
  std::filesystem::path tokenizer_file;
  if (args.has("tokenizer"))
    tokenizer_file = args.required("tokenizer");
  else if (source.random)
    throw Error(
        "--config serves random weights and needs --tokenizer FILE (a tokenizer.json, e.g. "
        "../shared/data/tokenizers/qwen2/tokenizer.json)");
  else
    tokenizer_file = source.path / "tokenizer.json";
  for (const std::filesystem::path& file : {config_file, tokenizer_file})
    if (!std::filesystem::is_regular_file(file)) throw Error(cat(file, " not found"));

  EngineOptions engine_options;
  engine_options.mode = parse_mode(args.value("mode"));
  const bool graphs = parse_on_off(args.value("graphs"), "graphs");
  const bool warmup = args.has("warmup") ? parse_on_off(args.value("warmup"), "warmup")
                                         : backend.device == Device::Device_cuda;
  engine_options.overlap_rounds = parse_on_off(args.value("overlap-rounds"), "overlap-rounds");
  engine_options.balance_rounds = parse_on_off(args.value("balance-rounds"), "balance-rounds");
  engine_options.max_queue = parse_count(args.value("max-queue"), "max-queue", 128, 1, 4096);
  engine_options.round_tokens =
      parse_count(args.value("round-tokens"), "round-tokens", 65536, 1, int64_t(1) << 30);
  RouteLimits limits;
  limits.max_questions =
      parse_count(args.value("max-questions"), "max-questions", limits.max_questions, 1);
  limits.max_prompt_tokens = parse_count(args.value("max-prompt-tokens"), "max-prompt-tokens",
                                         limits.max_prompt_tokens, 0, int64_t(1) << 40);
  const nlohmann::json config = read_json_object(config_file, cat(config_file));
  const int64_t position_limit = max_model_len(config);
  const DecisionCalibration calibration =
      load_calibration(config, config_file, args.value("calibration"));
  limits.max_context_tokens = parse_count(args.value("max-context-tokens"), "max-context-tokens",
                                          position_limit, 1, int64_t(1) << 40);
  HttpOptions http_options;
  http_options.host = args.value("host").value_or("127.0.0.1");
  http_options.port = int(parse_count(args.value("port"), "port", 8000, 0, 65535));
  http_options.api_key = args.value("api-key").value_or("");
  http_options.access_log = parse_on_off(args.value("access-log"), "access-log");
  if (const std::optional<std::string> origins = args.value("allowed-origins"))
    http_options.cors = server::parse_allowed_origins(split_list(*origins));
  http_options.max_body_bytes = parse_count(args.value("max-body-bytes"), "max-body-bytes",
                                            http_options.max_body_bytes, 1, int64_t(1) << 34);
  // A thread per open connection: at least the waiting requests and a round's worth beside
  // them, and idle keep-alive clients and probes on top.
  http_options.threads =
      int(std::max<int64_t>(http_options.threads, 2 * engine_options.max_queue + 16));

  // Blocked before any thread starts, so every thread inherits the mask and only sigtimedwait
  // below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Metrics metrics;
  HttpServer http(http_options, metrics);
  const int port = http.bind();
  http.start();
  const std::string host = http_options.host.find(':') == std::string::npos
                               ? http_options.host
                               : "[" + http_options.host + "]";
  std::printf("flide serve: listening on http://%s:%d\n", host.c_str(), port);
  std::fflush(stdout);

  Served served;
  std::string load_error;
  std::atomic<bool> load_done{false};
  std::thread loader([&] {
    try {
      const auto start = std::chrono::steady_clock::now();
      std::fprintf(stderr, "flide serve: loading %s on %s\n", source.path.c_str(),
                   backend_description(backend).c_str());
      served.tokenizer.emplace(Tokenizer::load(tokenizer_file));
      served.loaded = load_model_source(source, backend);
      const ModelInfo& info = served.loaded.model->info();
      engine_options.policy = graphs_policy(*served.loaded.ops, graphs);
      if (warmup) warm_up_to_serve(*served.loaded.model, engine_options, limits.max_context_tokens);
      served.engine = std::make_unique<EngineLoop>(*served.loaded.model, engine_options, metrics);
      served.serving = std::make_unique<ServingModel>(
          ServingModel{{*served.tokenizer,
                        model_names.front(),
                        info.vocab_size,
                        limits,
                        calibration,
                        {model_names.begin() + 1, model_names.end()}},
                       *served.engine,
                       position_limit,
                       int64_t(std::time(nullptr))});
      http.set_serving(served.serving.get());
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr,
                   "flide serve: ready in %.1f s: model %s (%" PRId64
                   " layers), --mode %s; at most %d options per question; max queued = %" PRId64
                   " requests; rounds of up to %" PRId64 " tokens; calibration: %s\n",
                   seconds, served.serving->routes.model_id.c_str(), info.n_layers,
                   std::string(mode_name(engine_options.mode)).c_str(), kMaxOptions,
                   engine_options.max_queue, engine_options.round_tokens,
                   calibration.describe().c_str());
    } catch (const std::exception& e) {
      load_error = e.what();
    }
    load_done = true;
  });

  int status = kExitOk;
  for (;;) {
    const timespec tick{0, 100 * 1000 * 1000};
    const int signal = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal == SIGINT || signal == SIGTERM) {
      if (!load_done) {
        std::fprintf(stderr, "flide serve: stopped while loading\n");
        std::fflush(stderr);
        std::_Exit(kExitOk);
      }
      std::fprintf(stderr, "flide serve: stopping\n");
      break;
    }
    if (load_done && !load_error.empty()) {
      std::fprintf(stderr, "flide: error: %s\n", load_error.c_str());
      status = kExitUsage;
      break;
    }
  }
  loader.join();
  return drain(served.engine.get(), http, stop_signals, status);
}

}  // namespace flide::cli
