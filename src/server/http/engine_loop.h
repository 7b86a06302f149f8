// The queue between the HTTP threads and the model (STYLE.md 13): HTTP threads validate and
// prepare a request, then submit it here; one engine thread packs the waiting requests into
// rounds of at most `round_tokens` token rows (arrival order; a larger request runs alone),
// runs each round as one Executor::run, and answers every request through its future.
// Requests that arrive while a round runs join the next one (continuous batching).
//
// Requests that arrive together are prepared (validated, tokenized) side by side on HTTP
// threads and finish at slightly different times. So that the first one does not start a round
// alone and leave the others a whole round behind, an HTTP thread holds a Preparing ticket while
// it prepares, and a round about to start waits for the tickets, up to the smaller of
// max_gather_seconds and half the recent round time, or until the waiting requests fill it.
//
// Admission is bounded: past `max_queue` waiting requests, submit refuses with 429 and a
// Retry-After of about one round. A request whose client has gone is dropped just before its
// round. A round that throws is retried request by request, so one bad request cannot fail
// the others, and the loop keeps serving whatever happens.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>
#include <vector>

#include "engine/executor.h"
#include "server/http/metrics.h"
#include "server/prepared_request.h"

namespace flide::server {

struct EngineOptions {
  ExecMode mode = ExecMode::ExecMode_fork;
  int64_t max_queue = 128;       // admitted requests waiting for a round (>= 1)
  int64_t round_tokens = 65536;  // token rows per round (>= 1)
  // Longest wait of a round for requests still being prepared (see above).
  double max_gather_seconds = 0.05;
  // Padding to capacity buckets (CUDA graphs); flide serve sets it from --graphs.
  RoundPolicy policy;
};

class EngineLoop {
 public:
  // Held by an HTTP thread from a decision request's arrival until its submit (or refusal).
  class Preparing {
   public:
    Preparing() noexcept : loop_(nullptr) {}
    Preparing(Preparing&& other) noexcept : loop_(std::exchange(other.loop_, nullptr)) {}
    Preparing& operator=(Preparing&&) = delete;
    ~Preparing();

   private:
    friend class EngineLoop;
    explicit Preparing(EngineLoop* loop) : loop_(loop) {}
    EngineLoop* loop_;
  };

  // `model` must outlive the loop; the engine thread is its only user.
  EngineLoop(Model& model, EngineOptions options, Metrics& metrics);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Admits a prepared request; the future yields its 200 body, or throws ApiError: 499 when
  // `client_gone` (asked just before the round) says the client disconnected, 500 when the
  // model failed on it, 503 when the server stops first. Throws ApiError 429 at once when
  // max_queue requests are waiting, 503 after stop().
  // `ticket` (from preparing()) ends as the request joins the queue, in one step, so that a
  // round never sees it neither preparing nor waiting.
  std::future<nlohmann::ordered_json> submit(PreparedRequest request,
                                             std::function<bool()> client_gone,
                                             Preparing ticket = {});

  // A ticket counting one request in preparation until it is submitted or destroyed.
  Preparing preparing();

  // Finishes the running round, answers the waiting requests 503 and joins the engine thread.
  void stop();

  const EngineOptions& options() const { return options_; }

 private:
  struct Job {
    PreparedRequest request;
    std::function<bool()> client_gone;
    std::promise<nlohmann::ordered_json> answer;
    std::chrono::steady_clock::time_point admitted;
    int64_t tokens = 0;  // stream rows (stream_tokens)
  };

  void run();
  std::vector<Job> next_round();  // blocks; empty when stopping
  void run_round(std::vector<Job>& jobs);
  int retry_after_s() const;  // caller holds mutex_
  // Waits, bounded, for requests in preparation to join the round about to start.
  void gather(std::unique_lock<std::mutex>& lock);

  Executor executor_;
  EngineOptions options_;
  Metrics& metrics_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> waiting_;
  int64_t waiting_tokens_ = 0;  // stream rows of waiting_
  int64_t preparing_ = 0;       // live Preparing tickets
  bool stopping_ = false;
  double round_seconds_ = 0;  // recent round time (exponential average), for Retry-After
  std::thread thread_;
};

}  // namespace flide::server
