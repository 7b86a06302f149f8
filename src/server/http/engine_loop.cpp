// The engine loop (see engine_loop.h).
#include "server/http/engine_loop.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>

#include "core/error.h"
#include "server/routes/errors.h"

namespace flide::server {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}
double seconds_since(Clock::time_point start) {
  return seconds_between(start, Clock::now());
}

ApiError server_error(const std::string& message) {
  return ApiError(500, "server_error", message);
}

}  // namespace

EngineLoop::EngineLoop(Model& model, EngineOptions options, Metrics& metrics)
    : executor_(model, options.policy), options_(options), metrics_(metrics) {
  FLIDE_CHECK(options_.max_queue >= 1 && options_.round_tokens >= 1);
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  stop();
}

std::future<nlohmann::ordered_json> EngineLoop::submit(PreparedRequest request,
                                                       std::function<bool()> client_gone) {
  Job job{std::move(request), std::move(client_gone), {}, Clock::now()};
  std::future<nlohmann::ordered_json> answer = job.answer.get_future();
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw unavailable("the server is shutting down");
    if (int64_t(waiting_.size()) >= options_.max_queue)
      throw rate_limited(cat("the decision queue is full (", options_.max_queue,
                             " requests waiting, --max-queue); retry after the Retry-After delay"),
                         retry_after_s());
    waiting_.push_back(std::move(job));
    metrics_.set_queue_depth(int64_t(waiting_.size()));
  }
  wake_.notify_one();
  return answer;
}

bool EngineLoop::stopping() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stopping_;
}

void EngineLoop::stop() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int EngineLoop::retry_after_s() const {
  // A slot frees up when the running round ends: about one round from now.
  return std::max(1, int(std::ceil(round_seconds_)));
}

void EngineLoop::run() {
  const bool overlap = options_.overlap_rounds && executor_.asynchronous();
  std::optional<Flight> flight;  // a round on the device, its answers not yet rendered
  for (;;) {
    // With a round on the device the next one is formed when that round reaches its tail, and
    // queued behind it before its answers are rendered: the device does not wait for the host
    // between rounds. Requests that arrive during the tail wait for the round after.
    if (flight) {
      try {
        executor_.wait_tail();
      } catch (const std::exception&) {  // the device failed: collecting the round says so
      }
    }
    std::vector<Job> jobs =
        next_round(/*block=*/!flight, flight ? int64_t(flight->jobs.size()) : int64_t(0));
    if (jobs.empty() && !flight) break;  // stopping, every admitted request answered
    std::optional<Flight> next;
    std::optional<std::string> refused;  // why the model refused the round as a whole (at submit)
    if (!jobs.empty()) {
      try {
        next = launch(jobs);
      } catch (const std::exception& e) {
        refused = e.what();
      }
    }
    if (flight) land(*flight);
    flight.reset();
    if (refused) {
      run_alone(jobs, *refused);
    } else if (next && !overlap) {
      land(*next);
    } else {
      flight = std::move(next);
    }
  }
}

std::vector<EngineLoop::Job> EngineLoop::next_round(bool block, int64_t running) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::vector<Job> round;
  while (round.empty()) {
    if (block) wake_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
    if (stopping_ && waiting_.empty()) return {};
    const int64_t cap = options_.balance_rounds && running > 0
                            ? std::max<int64_t>(1, (int64_t(waiting_.size()) + running + 1) / 2)
                            : std::numeric_limits<int64_t>::max();
    int64_t tokens = 0;
    while (!waiting_.empty() && int64_t(round.size()) < cap) {
      Job& job = waiting_.front();
      if (job.client_gone && job.client_gone()) {
        job.answer.set_exception(std::make_exception_ptr(ApiError(
            499, "client_closed_request", "the client disconnected before the request ran")));
        metrics_.request_dropped();
        waiting_.pop_front();
        continue;
      }
      const int64_t cost = stream_tokens(job.request.tree, options_.mode);
      if (!round.empty() && tokens + cost > options_.round_tokens) break;
      tokens += cost;
      metrics_.queue_wait(seconds_since(job.admitted));
      round.push_back(std::move(job));
      waiting_.pop_front();
    }
    metrics_.set_queue_depth(int64_t(waiting_.size()));
    if (!block) break;
  }
  return round;
}

EngineLoop::Flight EngineLoop::launch(std::vector<Job>& jobs) {
  // The trees stay in `jobs`, whose elements the flight takes over without moving them.
  std::vector<const Tree*> trees;
  trees.reserve(jobs.size());
  for (const Job& job : jobs) trees.push_back(&job.request.tree);
  const Clock::time_point start = Clock::now();
  executor_.submit(std::move(trees), options_.mode);
  return Flight{std::move(jobs), start};
}

void EngineLoop::run_alone(std::vector<Job>& jobs, const std::string& refusal) {
  if (jobs.size() == 1) {  // the request at fault
    jobs[0].answer.set_exception(
        std::make_exception_ptr(server_error(cat("the model failed on this request: ", refusal))));
    return;
  }
  for (Job& job : jobs) {  // find the request at fault; the others still get answers
    std::vector<Job> alone;
    alone.push_back(std::move(job));
    try {
      Flight flight = launch(alone);
      land(flight);
    } catch (const std::exception& e) {
      run_alone(alone, e.what());
    }
  }
}

void EngineLoop::land(Flight& flight) {
  std::vector<Job>& jobs = flight.jobs;
  std::vector<TreeResult> results;
  RunStats stats;
  try {
    results = executor_.collect(&stats);
  } catch (const std::exception& e) {  // the device's failure, not a request's: submit checks those
    for (Job& job : jobs)
      job.answer.set_exception(
          std::make_exception_ptr(server_error(cat("the model failed on this round: ", e.what()))));
    return;
  }
  // The round's device time: from its submission, or from the end of the round it queued
  // behind.
  const Clock::time_point done = Clock::now();
  const double seconds = seconds_between(std::max(flight.submitted, device_free_), done);
  device_free_ = done;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    round_seconds_ = round_seconds_ == 0 ? seconds : 0.8 * round_seconds_ + 0.2 * seconds;
  }
  // Every answer is rendered and the round counted before any client hears back, so that a
  // client that reads /metrics after its answer sees its own request in them.
  RoundReport report;
  report.seconds = seconds;
  report.tokens_computed = stats.tokens_computed;
  std::vector<std::optional<nlohmann::ordered_json>> bodies(jobs.size());
  std::vector<std::exception_ptr> failures(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PreparedRequest& request = jobs[i].request;
    try {
      bodies[i] = request.respond(results[i]);
    } catch (const std::exception& e) {
      failures[i] =
          std::make_exception_ptr(server_error(cat("cannot render the answer: ", e.what())));
      continue;
    }
    ++report.requests;
    report.questions += request.n_questions;
    report.prompt_tokens += request.input_tokens;
    if (options_.mode == ExecMode::ExecMode_fork)
      report.shared_tokens += request.rendered_tokens - request.input_tokens;
  }
  metrics_.round_done(report);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (bodies[i])
      jobs[i].answer.set_value(std::move(*bodies[i]));
    else
      jobs[i].answer.set_exception(failures[i]);
  }
}

}  // namespace flide::server
