// The load of `flide bench-serve` (see serve_load.h).
#include "serve_load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"

namespace flide::cli {

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Counts one level's answers; every sender reports to it.
class Recorder {
 public:
  Recorder(const LoadPlan& plan, Phase& phase, Clock::time_point start)
      : plan_(plan),
        phase_(phase),
        start_(start),
        measure_from_(start + seconds(plan.warmup_s)),
        end_(measure_from_ + seconds(plan.duration_s)) {}

  Clock::time_point start() const { return start_; }
  Clock::time_point end() const { return end_; }

  // Request k, sent by `client`, answered (or not) at `done`; its latency runs from `from`.
  void answered(int client, int64_t k, Clock::time_point from, Clock::time_point done,
                const httplib::Result& result) {
    const TextRequest& request = plan_.requests[size_t(k) % plan_.requests.size()];
    const bool measured = done >= measure_from_ && done <= end_;
    const std::lock_guard<std::mutex> lock(mutex_);
    phase_.records.push_back({client, k, std::chrono::duration<double>(from - start_).count(),
                              std::chrono::duration<double, std::milli>(done - from).count(),
                              result ? result->status : 0, measured});
    if (!result || result->status != 200) {
      if (!measured) return;
      if (result && result->status == 429) {
        ++phase_.refused;
        return;
      }
      if (phase_.failed++ == 0)
        phase_.first_failure = result
                                   ? cat("HTTP ", result->status, ": ", result->body.substr(0, 200))
                                   : httplib::to_string(result.error());
      return;
    }
    const nlohmann::json answer = nlohmann::json::parse(result->body, nullptr, false);
    try {
      phase_.answers[k] = answer_probabilities(answer, request, plan_.route);
    } catch (const std::exception& e) {
      if (measured && phase_.failed++ == 0) phase_.first_failure = e.what();
      return;
    }
    if (!measured) return;
    ++phase_.requests;
    phase_.questions += int64_t(request.questions.size());
    input_tokens_ += answer["usage"].value("input_tokens", 0.0);
    phase_.latency_ms.push_back(phase_.records.back().latency_ms);
  }

  void finish() {
    std::sort(phase_.latency_ms.begin(), phase_.latency_ms.end());
    if (phase_.requests > 0) phase_.input_tokens = input_tokens_ / double(phase_.requests);
  }

 private:
  const LoadPlan& plan_;
  Phase& phase_;
  const Clock::time_point start_, measure_from_, end_;
  std::mutex mutex_;
  double input_tokens_ = 0;
};

// Sends request k on `client` and reports it; its latency runs from `arrival`, or from when it
// is sent when that is unset (closed loop).
void send(const LoadPlan& plan, httplib::Client& client, int index, int64_t k,
          Clock::time_point arrival, Recorder& recorder) {
  const TextRequest& request = plan.requests[size_t(k) % plan.requests.size()];
  const std::string body =
      request_body(request, cat(plan.run_tag, "-r", k), plan.route, plan.model);
  const Clock::time_point sent = Clock::now();
  httplib::Result result = client.Post(plan.path, body, "application/json");
  recorder.answered(index, k, arrival == Clock::time_point{} ? sent : arrival, Clock::now(),
                    result);
}

void run_closed_loop(const LoadPlan& plan, int clients, Recorder& recorder) {
  std::atomic<int64_t> next{0};
  const auto client_loop = [&](int index) {
    const std::unique_ptr<httplib::Client> client = make_client(plan.url, plan.api_key);
    while (Clock::now() < recorder.end()) send(plan, *client, index, next++, {}, recorder);
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) threads.emplace_back(client_loop, c);
  for (std::thread& t : threads) t.join();
}

// Sets the phase's connections, arrivals and unsent. Arrivals still waiting for a connection
// when the window ends are never sent (counted as unsent); requests in flight are waited for
// (they count only if in the window).
void run_open_loop(const LoadPlan& plan, const LoadLevel& level, Recorder& recorder, Phase& phase) {
  struct Arrival {
    int64_t k;
    Clock::time_point at;
  };
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Arrival> waiting;
  int idle = 0;  // senders waiting for an arrival
  bool closing = false;
  std::vector<std::thread> senders;
  const auto sender = [&](int index) {
    const std::unique_ptr<httplib::Client> client = make_client(plan.url, plan.api_key);
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      ++idle;
      wake.wait(lock, [&] { return closing || !waiting.empty(); });
      --idle;
      if (waiting.empty()) return;
      const Arrival arrival = waiting.front();
      waiting.pop_front();
      lock.unlock();
      send(plan, *client, index, arrival.k, arrival.at, recorder);
      lock.lock();
    }
  };
  std::mt19937_64 rng(plan.seed);
  std::exponential_distribution<double> gap(level.rate);
  Clock::time_point at = recorder.start();
  for (int64_t k = 0;; ++k) {
    at += seconds(gap(rng));
    if (at >= recorder.end()) {
      phase.arrivals = k;
      break;
    }
    std::this_thread::sleep_until(at);
    {
      const std::lock_guard<std::mutex> lock(mutex);
      waiting.push_back({k, at});
      // Every waiting arrival has an idle sender, or gets a new one while the cap allows.
      if (int(waiting.size()) > idle && int(senders.size()) < level.max_concurrency)
        senders.emplace_back(sender, int(senders.size()));
    }
    wake.notify_one();
  }
  {
    const std::lock_guard<std::mutex> lock(mutex);
    closing = true;
    phase.unsent = int64_t(waiting.size());
    waiting.clear();
  }
  wake.notify_all();
  for (std::thread& t : senders) t.join();
  phase.connections = int(senders.size());
}

}  // namespace

std::string LoadLevel::label() const {
  if (clients > 0) return cat(clients, clients == 1 ? " client" : " clients");
  char rate_text[32];
  std::snprintf(rate_text, sizeof rate_text, "%g/s", rate);
  return rate_text;
}

Phase run_level(const LoadPlan& plan, const LoadLevel& level) {
  FLIDE_CHECK(!plan.requests.empty() &&
              (level.clients > 0 || (level.rate > 0 && level.max_concurrency > 0)));
  Phase phase;
  phase.level = level;
  Recorder recorder(plan, phase, Clock::now());
  if (level.clients > 0) {
    run_closed_loop(plan, level.clients, recorder);
    phase.connections = level.clients;
  } else {
    run_open_loop(plan, level, recorder, phase);
  }
  recorder.finish();
  return phase;
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

}  // namespace flide::cli
