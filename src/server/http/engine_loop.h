// The queue between the HTTP threads and the model (STYLE.md 13): HTTP threads validate and
// prepare a request, then submit it here; one engine thread packs the waiting requests into
// rounds of at most `round_tokens` token rows (arrival order; a larger request runs alone),
// submits each round to the Executor, and answers every request through its future. Requests
// that arrive while a round runs join the next one (continuous batching). On an asynchronous
// backend (CUDA) the next round is formed and queued on the device while the running round is
// in its last layers, and the running round's answers are rendered while the next computes, so
// the device does not idle through the host's work between rounds. A round formed while another
// runs takes at most half of the requests in the system (EngineOptions::balance_rounds).
//
// Admission is bounded: past `max_queue` waiting requests, submit refuses with 429 and a
// Retry-After of about one round. A request whose client has gone is dropped just before its
// round. A round that throws is retried request by request, so one bad request cannot fail
// the others, and the loop keeps serving whatever happens. (Requests are checked when their
// round is submitted; a failure after that is the device's, and fails the whole round.)
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/executor.h"
#include "server/http/metrics.h"
#include "server/prepared_request.h"

namespace flide::server {

struct EngineOptions {
  ExecMode mode = ExecMode::ExecMode_fork;
  int64_t max_queue = 128;       // admitted requests waiting for a round (>= 1)
  int64_t round_tokens = 65536;  // token rows per round (>= 1)
  // Overlap a round's host work with the device's work on the round before (when the model is
  // asynchronous; flide serve --overlap-rounds).
  bool overlap_rounds = true;
  // A round formed while another runs takes at most half of the requests in the system (waiting
  // and running, rounded up): closed-loop clients then settle into rounds of equal size, not a
  // small round and a large one in turn, which a round's fixed costs make slower (flide serve
  // --balance-rounds; bench/results/2026-12-01-balanced-rounds.md).
  bool balance_rounds = true;
  // Padding to capacity buckets (CUDA graphs); flide serve sets it from --graphs.
  RoundPolicy policy;
};

class EngineLoop {
 public:
  // `model` must outlive the loop; the engine thread is its only user.
  EngineLoop(Model& model, EngineOptions options, Metrics& metrics);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Admits a prepared request; the future yields its 200 body, or throws ApiError: 499 when
  // `client_gone` (asked just before the round) says the client disconnected, 500 when the
  // model failed on it. Throws ApiError 429 at once when max_queue requests are waiting, 503
  // once stop() has begun.
  std::future<nlohmann::ordered_json> submit(PreparedRequest request,
                                             std::function<bool()> client_gone);

  // Closes admission, runs every request already admitted (nothing accepted is lost; a second
  // signal is the way to cut that short, cmd_serve.cpp) and joins the engine thread.
  void stop();
  bool stopping();  // stop() has begun: /health answers 503, as new requests get

  const EngineOptions& options() const { return options_; }

 private:
  struct Job {
    PreparedRequest request;
    std::function<bool()> client_gone;
    std::promise<nlohmann::ordered_json> answer;
    std::chrono::steady_clock::time_point admitted;
  };

  // A round submitted to the executor, its answers not yet rendered.
  struct Flight {
    std::vector<Job> jobs;
    std::chrono::steady_clock::time_point submitted;
  };

  void run();
  // The waiting requests that fit a round, `running` requests being on the device; with `block`,
  // waits for one (empty when stopping with none left).
  std::vector<Job> next_round(bool block, int64_t running);
  Flight launch(std::vector<Job>& jobs);  // submits; on a throw `jobs` stay the caller's
  void land(Flight& flight);              // collects, renders and answers
  // Retries a refused round request by request (none other in flight): 500 for the one at fault.
  void run_alone(std::vector<Job>& jobs, const std::string& refusal);
  int retry_after_s() const;  // caller holds mutex_

  Executor executor_;
  EngineOptions options_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> waiting_;
  bool stopping_ = false;
  double round_seconds_ = 0;  // recent round time (exponential average), for Retry-After
  std::chrono::steady_clock::time_point device_free_;  // when the last collected round ended
  std::thread thread_;
};

}  // namespace flide::server
