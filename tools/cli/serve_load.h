// The load `flide bench-serve` puts on a decision server, one level at a time, for --warmup
// then --duration seconds:
//   - closed loop (--clients N): N clients, each sends a request, waits for its answer and sends
//     the next, so the load follows the server's speed;
//   - open loop (--request-rate R): requests arrive at R a second on average, at exponentially
//     distributed intervals (Poisson arrivals, as vLLM's benchmark --request-rate draws them),
//     each sent when it arrives on an idle connection, a new one opened when none is idle, up to
//     --max-concurrency requests in flight (arrivals beyond wait for a connection). The load does
//     not follow the server: past its capacity, latency grows for as long as the run lasts,
//     and arrivals still waiting for a connection when the window ends are counted as unsent.
// A request counts when it completes inside the measured window; its latency runs from when it
// was sent (closed loop) or from its arrival (open loop, so a wait for a connection counts).
// Request k of a level (k counts over the level) carries the tag "<run>-r<k>" and the text of
// workload request k mod n, so the answers to request k can be compared across levels.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "serve_workload.h"

namespace flide::cli {

struct LoadPlan {
  std::string url, api_key, path, model, run_tag;
  ServeRoute route = ServeRoute::ServeRoute_systemone;
  std::vector<TextRequest> requests;
  double warmup_s = 0, duration_s = 0;
  uint64_t seed = 0;  // open loop: the arrival times
};

// One load level: `clients` closed-loop clients, or (clients 0) open-loop arrivals at `rate`
// requests a second with at most `max_concurrency` in flight.
struct LoadLevel {
  int clients = 0;
  double rate = 0;
  int max_concurrency = 0;
  std::string label() const;  // "8 clients", "40/s"
};

// One answered request (any status), for --save-requests.
struct RequestRecord {
  int client = 0;  // the client (closed loop) or connection (open loop) that sent it
  int64_t k = 0;
  double sent_s = 0, latency_ms = 0;  // from the start of the level's warm-up; see above
  int status = 0;                     // the HTTP status; 0 when no HTTP answer came
  bool measured = false;
};

struct Phase {
  LoadLevel level;
  int64_t requests = 0;   // 200s completed in the measured window
  int64_t questions = 0;  // their questions
  int64_t refused = 0;    // 429s in the window
  int64_t failed = 0;     // other failures in the window
  std::string first_failure;
  double input_tokens = 0;  // mean usage.input_tokens of the 200s
  int connections = 0;      // connections the level opened
  // Open loop: the level's arrivals (warm-up included), and those still waiting for a
  // connection when the window ended, never sent (the server fell behind the rate).
  int64_t arrivals = 0, unsent = 0;
  std::vector<double> latency_ms;                               // sorted
  std::map<int64_t, std::vector<std::vector<double>>> answers;  // request k -> probabilities
  std::vector<RequestRecord> records;                           // in order of completion
};

Phase run_level(const LoadPlan& plan, const LoadLevel& level);

// A keep-alive client of the server with generous timeouts; Error for a URL it cannot use.
std::unique_ptr<httplib::Client> make_client(const std::string& url, const std::string& api_key);

}  // namespace flide::cli
