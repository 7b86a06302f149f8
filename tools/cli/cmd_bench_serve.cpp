// `flide bench-serve`: closed-loop HTTP clients against a running `flide serve` (or any server
// of the two decision formats). For each client count, that many threads each send a request,
// wait for its answer and send the next, for --warmup then --duration seconds; requests that
// complete inside the measured window give requests/s, questions/s and latency percentiles.
//
// Replicates: request k of a run (k counts over all clients) carries the tag "<run>-r<k>" at the
// start of its state, so no two requests of a client count share a trunk, and request k has
// the same text at every client count. Comparing the answers to the same k at the lowest and
// the highest client count gives the share of top answers that batching under load changed
// (0 for a batch-invariant server; the closing line also gives the largest probability
// change).
//
// --save-requests FILE writes every answered request as a JSON line (as vLLM's benchmark
// --save-detailed does): which client sent it, when, how long it took, its status, and whether
// it fell in the measured window, so that a latency tail can be placed in time.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "serve_workload.h"

namespace flide::cli {

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    R"(usage: flide bench-serve --url URL --workload W [options]

Closed-loop clients against a decision server: for each client count, every client sends a
request, waits for the answer and sends the next. Prints requests/s, questions/s and latency
p50/p90/p99/max per client count, and the share of top answers that differ between the lowest and
the highest client count (the same requests, answered under different load).

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
  --clients LIST        client counts, comma-separated (default: 1,8,64)
  --duration S          measured seconds per client count (default: 10)
  --warmup S            unmeasured seconds before each (default: 2)
  --route systemone|decisions
                        POST /v1/systemone (default) or /v1/decisions
  --api-key KEY         sent as `Authorization: Bearer KEY`
  --seed N              synthetic text (default: 0)
  --save-requests FILE  every answered request as a JSON line: clients, client, k, sent_s
                        (from the start of its client count's warm-up), latency_ms, status,
                        measured
  --json                one JSON line instead of the table
  --help                this text
)";

std::vector<int> parse_clients(const std::optional<std::string>& value) {
  std::vector<int> clients;
  const std::string text = value.value_or("1,8,64");
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    clients.push_back(int(parse_count(text.substr(begin, end - begin), "clients", 0, 1, 4096)));
    begin = end + 1;
  }
  std::sort(clients.begin(), clients.end());
  clients.erase(std::unique(clients.begin(), clients.end()), clients.end());
  return clients;
}

ServeRoute parse_route(const std::optional<std::string>& value) {
  if (!value || *value == "systemone") return ServeRoute::ServeRoute_systemone;
  if (*value == "decisions") return ServeRoute::ServeRoute_decisions;
  throw Error(cat("--route: unknown route \"", *value, "\" (systemone or decisions)"));
}

std::unique_ptr<httplib::Client> make_client(const std::string& url, const std::string& api_key) {
  auto client = std::make_unique<httplib::Client>(url);
  if (!client->is_valid()) throw Error(cat("--url: \"", url, "\" is not an http(s)://HOST:PORT"));
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);  // a request's header and body go out without waiting
  client->set_connection_timeout(10);
  client->set_read_timeout(600);  // a long request under heavy load
  client->set_write_timeout(60);
  if (!api_key.empty()) client->set_bearer_token_auth(api_key);
  return client;
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

// One answered request (any status), for --save-requests.
struct RequestRecord {
  int client = 0;
  int64_t k = 0;
  double sent_s = 0, latency_ms = 0;
  int status = 0;  // the HTTP status; 0 when no HTTP answer came
  bool measured = false;
};

struct Phase {
  int clients = 0;
  int64_t requests = 0;   // 200s completed in the measured window
  int64_t questions = 0;  // their questions
  int64_t refused = 0;    // 429s in the window
  int64_t failed = 0;     // other failures in the window
  std::string first_failure;
  double input_tokens = 0;         // mean usage.input_tokens of the 200s
  std::vector<double> latency_ms;  // sorted
  std::map<int64_t, std::vector<std::vector<double>>> answers;  // request k -> probabilities
  std::vector<RequestRecord> records;                           // in order of completion
};

struct Plan {
  std::string url, api_key, path, model, run_tag;
  ServeRoute route;
  std::vector<TextRequest> requests;
  double warmup_s = 0, duration_s = 0;
};

Phase run_phase(const Plan& plan, int clients) {
  Phase phase;
  phase.clients = clients;
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  const Clock::time_point start = Clock::now();
  const Clock::time_point measure_from = start + std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(plan.warmup_s));
  const Clock::time_point end = measure_from + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(plan.duration_s));
  double input_tokens = 0;

  const auto client_loop = [&](int client_index) {
    const std::unique_ptr<httplib::Client> client = make_client(plan.url, plan.api_key);
    while (Clock::now() < end) {
      const int64_t k = next++;
      const TextRequest& request = plan.requests[size_t(k) % plan.requests.size()];
      const std::string body =
          request_body(request, cat(plan.run_tag, "-r", k), plan.route, plan.model);
      const Clock::time_point sent = Clock::now();
      httplib::Result result = client->Post(plan.path, body, "application/json");
      const Clock::time_point done = Clock::now();
      const bool measured = done >= measure_from && done <= end;
      const std::lock_guard<std::mutex> lock(mutex);
      phase.records.push_back({client_index, k, std::chrono::duration<double>(sent - start).count(),
                               std::chrono::duration<double, std::milli>(done - sent).count(),
                               result ? result->status : 0, measured});
      if (!result || result->status != 200) {
        if (!measured) continue;
        if (result && result->status == 429) {
          ++phase.refused;
          continue;
        }
        if (phase.failed++ == 0)
          phase.first_failure =
              result ? cat("HTTP ", result->status, ": ", result->body.substr(0, 200))
                     : httplib::to_string(result.error());
        continue;
      }
      const nlohmann::json answer = nlohmann::json::parse(result->body, nullptr, false);
      try {
        phase.answers[k] = answer_probabilities(answer, request, plan.route);
      } catch (const std::exception& e) {
        if (measured && phase.failed++ == 0) phase.first_failure = e.what();
        continue;
      }
      if (!measured) continue;
      ++phase.requests;
      phase.questions += int64_t(request.questions.size());
      input_tokens += answer["usage"].value("input_tokens", 0.0);
      phase.latency_ms.push_back(phase.records.back().latency_ms);
    }
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) threads.emplace_back(client_loop, c);
  for (std::thread& t : threads) t.join();
  std::sort(phase.latency_ms.begin(), phase.latency_ms.end());
  if (phase.requests > 0) phase.input_tokens = input_tokens / double(phase.requests);
  return phase;
}

void save_requests(std::ofstream& file, const Phase& phase) {
  for (const RequestRecord& r : phase.records)
    file << json({{"clients", phase.clients},
                  {"client", r.client},
                  {"k", r.k},
                  {"sent_s", r.sent_s},
                  {"latency_ms", r.latency_ms},
                  {"status", r.status},
                  {"measured", r.measured}})
                .dump()
         << '\n';
  file.flush();
  if (!file) throw Error("--save-requests: writing the file failed");
}

struct Changes {
  int64_t compared = 0;  // questions answered at both client counts
  int64_t changed = 0;   // whose top answer differs
  double max_dp = 0;     // largest probability difference
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

}  // namespace

int cmd_bench_serve(const std::vector<std::string>& argv) {
  const Args args = Args::parse(argv, {{"url", true},
                                       {"workload", true},
                                       {"clients", true},
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
  Plan plan;
  plan.url = args.required("url");
  const WorkloadSpec spec = parse_workload(args.required("workload"));
  const std::vector<int> clients = parse_clients(args.value("clients"));
  plan.duration_s = double(parse_count(args.value("duration"), "duration", 10, 1, 86400));
  plan.warmup_s = double(parse_count(args.value("warmup"), "warmup", 2, 0, 86400));
  plan.route = parse_route(args.value("route"));
  plan.path = plan.route == ServeRoute::ServeRoute_systemone ? "/v1/systemone" : "/v1/decisions";
  plan.api_key = args.value("api-key").value_or("");
  const uint64_t seed = parse_seed(args.value("seed"));
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
      const std::string sample = json({{"content", pseudo_text(kSampleWords, seed)}}).dump();
      const size_t tokens = call(*probe, "/tokenize", &sample).at("tokens").size();
      tokens_per_word = double(tokens) / double(kSampleWords);
    }
  } catch (const std::exception& e) {
    throw Error(cat("--url ", plan.url, ": ", e.what()));
  }
  plan.requests = serve_requests(spec, tokens_per_word, seed);
  plan.run_tag = cat("bench-", std::random_device{}() % 1000000);
  const std::string workload = spec.synthetic ? spec.synthetic->name : spec.file.string();

  std::vector<Phase> phases;
  for (int c : clients) {
    if (!as_json)
      std::fprintf(stderr, "bench-serve: %d client%s, %.0f s + %.0f s warm-up...\n", c,
                   c == 1 ? "" : "s", plan.duration_s, plan.warmup_s);
    phases.push_back(run_phase(plan, c));
    if (saved.is_open()) save_requests(saved, phases.back());
  }
  // With one client count there is nothing to compare.
  const bool compared = phases.size() > 1;
  const Changes changes = compared ? compare(phases.front(), phases.back()) : Changes{};
  const double share = changes.compared ? double(changes.changed) / double(changes.compared) : 0;

  if (as_json) {
    json runs = json::array();
    for (const Phase& p : phases)
      runs.push_back({{"clients", p.clients},
                      {"requests", p.requests},
                      {"refused", p.refused},
                      {"failed", p.failed},
                      {"requests_per_s", double(p.requests) / plan.duration_s},
                      {"questions_per_s", double(p.questions) / plan.duration_s},
                      {"p50_ms", quantile(p.latency_ms, 0.5)},
                      {"p90_ms", quantile(p.latency_ms, 0.9)},
                      {"p99_ms", quantile(p.latency_ms, 0.99)},
                      {"max_ms", quantile(p.latency_ms, 1.0)},
                      {"input_tokens_mean", p.input_tokens}});
    json out = {{"url", plan.url},
                {"route", plan.path},
                {"model", plan.model},
                {"workload", workload},
                {"duration_s", plan.duration_s},
                {"warmup_s", plan.warmup_s},
                {"runs", std::move(runs)}};
    out["top_answer_changes"] = nullptr;
    if (compared)
      out["top_answer_changes"] = {{"from_clients", phases.front().clients},
                                   {"to_clients", phases.back().clients},
                                   {"compared", changes.compared},
                                   {"changed", changes.changed},
                                   {"share", share},
                                   {"max_abs_dprob", changes.max_dp}};
    std::cout << out.dump() << '\n';
  } else {
    std::printf("%s %s, model %s: workload %s, %.0f s per client count\n", plan.url.c_str(),
                plan.path.c_str(), plan.model.c_str(), workload.c_str(), plan.duration_s);
    std::printf("%8s %9s %8s %7s %9s %12s %9s %9s %9s %9s %10s\n", "clients", "requests", "refused",
                "failed", "req/s", "questions/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
                "in tokens");
    for (const Phase& p : phases)
      std::printf("%8d %9" PRId64 " %8" PRId64 " %7" PRId64
                  " %9.2f %12.1f %9.1f %9.1f %9.1f %9.1f %10.0f\n",
                  p.clients, p.requests, p.refused, p.failed, double(p.requests) / plan.duration_s,
                  double(p.questions) / plan.duration_s, quantile(p.latency_ms, 0.5),
                  quantile(p.latency_ms, 0.9), quantile(p.latency_ms, 0.99),
                  quantile(p.latency_ms, 1.0), p.input_tokens);
    if (compared)
      std::printf("top answers changed between %d and %d clients: %" PRId64 " of %" PRId64
                  " questions (%.2f%%); largest probability change %.3g\n",
                  phases.front().clients, phases.back().clients, changes.changed, changes.compared,
                  100 * share, changes.max_dp);
  }
  int status = kExitOk;
  for (const Phase& p : phases) {
    if (!p.failed) continue;
    std::fprintf(stderr, "bench-serve: %d clients: %" PRId64 " failed requests; first: %s\n",
                 p.clients, p.failed, p.first_failure.c_str());
    status = kExitFailedRequests;
  }
  return status;
}

}  // namespace flide::cli
