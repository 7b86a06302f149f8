// `flide bench-serve`: load on a running `flide serve` (or any server of the two decision
// formats), one level at a time (serve_load.h): closed-loop clients (--clients) or open-loop
// Poisson arrivals (--request-rate). Requests that complete inside a level's measured window
// give requests/s, questions/s and latency percentiles.
//
// Replicates: request k of a level carries the tag "<run>-r<k>" at the start of its state, so
// no two requests of a level share a trunk, and request k has the same text at every level.
// Comparing the answers to the same k at the lowest and the highest load gives the share of top
// answers that batching under load changed (0 for a batch-invariant server; the closing line
// also gives the largest probability change).
//
// --save-requests FILE writes every answered request as a JSON line (as vLLM's benchmark
// --save-detailed does): which client sent it, when, how long it took, its status, and whether
// it fell in the measured window, so that a latency tail can be placed in time.
#include <httplib.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "serve_load.h"
#include "serve_workload.h"

namespace flide::cli {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kUsage =
    R"(usage: flide bench-serve --url URL --workload W [options]

Load on a decision server, one level at a time: closed-loop clients (--clients: every client
sends a request, waits for the answer and sends the next) or open-loop arrivals (--request-rate:
Poisson arrivals at that many requests a second, as vLLM's benchmark sends them). Prints
requests/s, questions/s and latency p50/p90/p99/max per level, and the share of top answers that
differ between the lowest and the highest load (the same requests, answered under different load).

workloads (text; each request's state starts with a unique tag):
  race_all      state ~450 tokens + 4 questions of ~50 tokens, 4 options
  race_one      state ~450 tokens + 1 question of ~50 tokens, 4 options
  quality_all   state ~5000 tokens + 18 questions of ~70 tokens, 4 options
  quality_one   state ~5000 tokens + 1 question of ~70 tokens, 4 options
  multirc_all   state ~330 tokens + 58 questions of ~35 tokens, 2 options
  FILE.jsonl    the text requests of a `flide decide` input file, in turn
(synthetic text is pseudo-words; its tokens per word are measured on the server's /tokenize)

options:
  --url URL             the server, e.g. http://127.0.0.1:8000
  --workload W          one of the above
  --clients LIST        closed loop: client counts, comma-separated (default: 1,8,64)
  --request-rate LIST   open loop instead: requests a second, comma-separated (e.g. 20,40.5);
                        a request's latency runs from its arrival
  --max-concurrency N   open loop: requests in flight at most, one connection each; arrivals
                        beyond wait for one (default: 256); those still waiting when the
                        window ends are never sent, and reported as unsent
  --duration S          measured seconds per level, e.g. 2.5 (default: 10; at least 0.1)
  --warmup S            unmeasured seconds before each (default: 2; 0: none)
  --route systemone|decisions
                        POST /v1/systemone (default) or /v1/decisions
  --api-key KEY         sent as `Authorization: Bearer KEY`
  --seed N              synthetic text and open-loop arrival times (default: 0)
  --save-requests FILE  every answered request as a JSON line: clients or request_rate, client
                        (or connection), k, sent_s (its arrival in open loop; from the start of
                        its level's warm-up), latency_ms, status, measured
  --json                one JSON line instead of the table
  --help                this text
)";

// The levels of --clients or --request-rate (comma-separated), lowest load first.
std::vector<LoadLevel> parse_levels(const Args& args) {
  const std::optional<std::string> rates = args.value("request-rate");
  if (rates && args.has("clients"))
    throw Error("--clients and --request-rate: give one (closed or open loop), not both");
  const int max_concurrency =
      int(parse_count(args.value("max-concurrency"), "max-concurrency", 256, 1, 4096));
  if (!rates && args.has("max-concurrency"))
    throw Error("--max-concurrency: only with --request-rate (open loop)");
  std::vector<LoadLevel> levels;
  for (const std::string& item :
       split_list(rates ? *rates : args.value("clients").value_or("1,8,64"))) {
    LoadLevel level;
    if (!rates) {
      level.clients = int(parse_count(item, "clients", 0, 1, 4096));
      levels.push_back(level);
      continue;
    }
    size_t used = 0;
    try {
      level.rate = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(level.rate > 0) || level.rate > 1e6)
      throw Error(cat("--request-rate: \"", item, "\" is not a rate (requests a second, > 0)"));
    level.max_concurrency = max_concurrency;
    levels.push_back(level);
  }
  const auto load = [](const LoadLevel& l) { return l.clients > 0 ? double(l.clients) : l.rate; };
  std::sort(levels.begin(), levels.end(),
            [&](const LoadLevel& a, const LoadLevel& b) { return load(a) < load(b); });
  levels.erase(
      std::unique(levels.begin(), levels.end(),
                  [&](const LoadLevel& a, const LoadLevel& b) { return load(a) == load(b); }),
      levels.end());
  return levels;
}

// A level's key and value in the JSON outputs: ("clients", N) or ("request_rate", R).
std::pair<std::string, json> level_key(const LoadLevel& level) {
  if (level.clients > 0) return {"clients", level.clients};
  return {"request_rate", level.rate};
}

// The level's keys in the JSON outputs: "clients", or "request_rate" and "max_concurrency".
void add_level(json& out, const LoadLevel& level) {
  const auto [key, value] = level_key(level);
  out[key] = value;
  if (level.clients == 0) out["max_concurrency"] = level.max_concurrency;
}

ServeRoute parse_route(const std::optional<std::string>& value) {
  if (!value || *value == "systemone") return ServeRoute::ServeRoute_systemone;
  if (*value == "decisions") return ServeRoute::ServeRoute_decisions;
  throw Error(cat("--route: unknown route \"", *value, "\" (systemone or decisions)"));
}

// A 200 JSON answer, or Error naming the route and what came back.
nlohmann::json call(httplib::Client& client, const std::string& path, const std::string* body) {
  httplib::Result result = body ? client.Post(path, *body, "application/json") : client.Get(path);
  if (!result)
    throw Error(cat(path, ": no HTTP answer (", httplib::to_string(result.error()), " error)"));
  if (result->status != 200)
    throw Error(cat(path, ": HTTP ", result->status, ": ", result->body.substr(0, 300)));
  return nlohmann::json::parse(result->body);
}

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = size_t(pos), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - double(lo)) * (sorted[hi] - sorted[lo]);
}

void save_requests(std::ofstream& file, const Phase& phase) {
  for (const RequestRecord& r : phase.records) {
    json line;
    add_level(line, phase.level);
    line.update(json({{"client", r.client},
                      {"k", r.k},
                      {"sent_s", r.sent_s},
                      {"latency_ms", r.latency_ms},
                      {"status", r.status},
                      {"measured", r.measured}}));
    file << line.dump() << '\n';
  }
  file.flush();
  if (!file) throw Error("--save-requests: writing the file failed");
}

struct Changes {
  int64_t compared = 0;  // questions answered at both client counts
  int64_t changed = 0;   // whose top answer differs
  double max_dp = 0;     // largest probability difference
  double share() const { return compared ? double(changed) / double(compared) : 0; }
};

Changes compare(const Phase& low, const Phase& high) {
  Changes changes;
  for (const auto& [k, probs] : low.answers) {
    const auto other = high.answers.find(k);
    if (other == high.answers.end()) continue;
    for (size_t q = 0; q < probs.size(); ++q) {
      const std::vector<double>& a = probs[q];
      const std::vector<double>& b = other->second[q];
      ++changes.compared;
      // Ties go to the first option, as the servers' argmax does.
      changes.changed += std::max_element(a.begin(), a.end()) - a.begin() !=
                         std::max_element(b.begin(), b.end()) - b.begin();
      for (size_t o = 0; o < a.size(); ++o)
        changes.max_dp = std::max(changes.max_dp, std::abs(a[o] - b[o]));
    }
  }
  return changes;
}

// The report as one JSON line.
void print_json(const LoadPlan& plan, const std::string& workload, const std::vector<Phase>& phases,
                const std::optional<Changes>& changes) {
  json runs = json::array();
  for (const Phase& p : phases) {
    json run;
    add_level(run, p.level);
    run.update(json({{"connections", p.connections},
                     {"requests", p.requests},
                     {"refused", p.refused},
                     {"failed", p.failed},
                     {"requests_per_s", double(p.requests) / plan.duration_s},
                     {"questions_per_s", double(p.questions) / plan.duration_s},
                     {"p50_ms", quantile(p.latency_ms, 0.5)},
                     {"p90_ms", quantile(p.latency_ms, 0.9)},
                     {"p99_ms", quantile(p.latency_ms, 0.99)},
                     {"max_ms", quantile(p.latency_ms, 1.0)},
                     {"input_tokens_mean", p.input_tokens}}));
    if (p.level.clients == 0) {
      run["arrivals"] = p.arrivals;
      run["unsent"] = p.unsent;
    }
    runs.push_back(std::move(run));
  }
  json out = {{"url", plan.url},
              {"route", plan.path},
              {"model", plan.model},
              {"workload", workload},
              {"duration_s", plan.duration_s},
              {"warmup_s", plan.warmup_s},
              {"runs", std::move(runs)}};
  out["top_answer_changes"] = nullptr;
  if (changes) {
    // from_clients/to_clients, or from_request_rate/to_request_rate
    json& c = out["top_answer_changes"];
    const auto [from_key, from] = level_key(phases.front().level);
    const auto [to_key, to] = level_key(phases.back().level);
    c["from_" + from_key] = from;
    c["to_" + to_key] = to;
    c.update(json({{"compared", changes->compared},
                   {"changed", changes->changed},
                   {"share", changes->share()},
                   {"max_abs_dprob", changes->max_dp}}));
  }
  std::cout << out.dump() << '\n';
}

void print_table(const LoadPlan& plan, const std::string& workload,
                 const std::vector<Phase>& phases, const std::optional<Changes>& changes) {
  std::printf("%s %s, model %s: workload %s, %g s per level\n", plan.url.c_str(), plan.path.c_str(),
              plan.model.c_str(), workload.c_str(), plan.duration_s);
  std::printf("%12s %9s %8s %7s %9s %12s %9s %9s %9s %9s %10s\n", "load", "requests", "refused",
              "failed", "req/s", "questions/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
              "in tokens");
  for (const Phase& p : phases)
    std::printf("%12s %9" PRId64 " %8" PRId64 " %7" PRId64
                " %9.2f %12.1f %9.1f %9.1f %9.1f %9.1f %10.0f\n",
                p.level.label().c_str(), p.requests, p.refused, p.failed,
                double(p.requests) / plan.duration_s, double(p.questions) / plan.duration_s,
                quantile(p.latency_ms, 0.5), quantile(p.latency_ms, 0.9),
                quantile(p.latency_ms, 0.99), quantile(p.latency_ms, 1.0), p.input_tokens);
  for (const Phase& p : phases)
    if (p.unsent > 0)
      std::printf("%s: %" PRId64 " of %" PRId64
                  " arrivals were never sent: no connection was free when the window ended "
                  "(--max-concurrency %d; the server fell behind the rate)\n",
                  p.level.label().c_str(), p.unsent, p.arrivals, p.level.max_concurrency);
  if (changes)
    std::printf("top answers changed between %s and %s: %" PRId64 " of %" PRId64
                " questions (%.2f%%); largest probability change %.3g\n",
                phases.front().level.label().c_str(), phases.back().level.label().c_str(),
                changes->changed, changes->compared, 100 * changes->share(), changes->max_dp);
}

}  // namespace

int cmd_bench_serve(const std::vector<std::string>& argv) {
  const Args args = Args::parse(argv, {{"url", true},
                                       {"workload", true},
                                       {"clients", true},
                                       {"request-rate", true},
                                       {"max-concurrency", true},
                                       {"duration", true},
                                       {"warmup", true},
                                       {"route", true},
                                       {"api-key", true},
                                       {"seed", true},
                                       {"save-requests", true},
                                       {"json", false},
                                       {"help", false}});
  if (args.has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  LoadPlan plan;
  plan.url = args.required("url");
  const WorkloadSpec spec = parse_workload(args.required("workload"));
  const std::vector<LoadLevel> levels = parse_levels(args);
  plan.duration_s = parse_seconds(args.value("duration"), "duration", 10, 0.1, 86400);
  plan.warmup_s = parse_seconds(args.value("warmup"), "warmup", 2, 0, 86400);
  plan.route = parse_route(args.value("route"));
  plan.path = plan.route == ServeRoute::ServeRoute_systemone ? "/v1/systemone" : "/v1/decisions";
  plan.api_key = args.value("api-key").value_or("");
  plan.seed = parse_seed(args.value("seed"));
  const bool as_json = args.has("json");
  std::ofstream saved;
  if (const std::optional<std::string> path = args.value("save-requests"))
    saved = open_output(*path, "save-requests");

  const std::unique_ptr<httplib::Client> probe = make_client(plan.url, plan.api_key);
  double tokens_per_word = 1;
  try {
    plan.model = call(*probe, "/v1/models", nullptr).at("data").at(0).at("id").get<std::string>();
    if (spec.synthetic) {
      constexpr int64_t kSampleWords = 2000;
      const std::string sample = json({{"content", pseudo_text(kSampleWords, plan.seed)}}).dump();
      const size_t tokens = call(*probe, "/tokenize", &sample).at("tokens").size();
      tokens_per_word = double(tokens) / double(kSampleWords);
    }
  } catch (const std::exception& e) {
    throw Error(cat("--url ", plan.url, ": ", e.what()));
  }
  plan.requests = serve_requests(spec, tokens_per_word, plan.seed);
  plan.run_tag = cat("bench-", std::random_device{}() % 1000000);
  const std::string workload = spec.synthetic ? spec.synthetic->name : spec.file.string();

  std::vector<Phase> phases;
  for (const LoadLevel& level : levels) {
    if (!as_json)
      std::fprintf(stderr, "bench-serve: %s, %g s + %g s warm-up...\n", level.label().c_str(),
                   plan.duration_s, plan.warmup_s);
    phases.push_back(run_level(plan, level));
    if (saved.is_open()) save_requests(saved, phases.back());
  }
  // With one level there is nothing to compare.
  std::optional<Changes> changes;
  if (phases.size() > 1) changes = compare(phases.front(), phases.back());
  if (as_json)
    print_json(plan, workload, phases, changes);
  else
    print_table(plan, workload, phases, changes);
  int status = kExitOk;
  for (const Phase& p : phases) {
    if (!p.failed) continue;
    std::fprintf(stderr, "bench-serve: %s: %" PRId64 " failed requests; first: %s\n",
                 p.level.label().c_str(), p.failed, p.first_failure.c_str());
    status = kExitFailedRequests;
  }
  return status;
}

}  // namespace flide::cli
