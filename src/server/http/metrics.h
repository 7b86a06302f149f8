// The server's counters, rendered as Prometheus text (exposition format 0.0.4) on GET /metrics.
// HTTP threads count requests as they answer them; the engine loop counts what it computed, so
// a request refused before admission (4xx, 429) or dropped before its round adds no prompt
// tokens. One mutex guards everything: a request updates a handful of numbers.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace flide::server {

// A cumulative histogram with fixed upper bounds (+Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // `name`_bucket{labels,le=...}, `name`_sum, `name`_count; `labels` is "" or `a="x",`.
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative; one more for +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What one engine round computed, for the round-level series.
struct RoundReport {
  int64_t requests = 0;         // jobs answered by the round (dropped ones excluded)
  int64_t questions = 0;        // over its requests
  int64_t prompt_tokens = 0;    // usage input_tokens over its requests (shared prefix once)
  int64_t shared_tokens = 0;    // trunk tokens its questions read instead of recomputing
  int64_t tokens_computed = 0;  // stream rows the model ran
  double seconds = 0;           // model time: submitted (or the round before done) to collected
};

class Metrics {
 public:
  Metrics();

  // One answered HTTP request: `route` is the path for known routes (callers map others to
  // "other" so hostile paths cannot grow the label set); `seconds` from arrival to answer.
  void request_answered(const std::string& route, int status, double seconds);
  void round_done(const RoundReport& round);
  void request_dropped();               // its client disconnected before its round
  void queue_wait(double seconds);      // admission to the start of its round
  void set_queue_depth(int64_t depth);  // requests admitted and waiting for a round

  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status) -> count
  std::map<std::string, Histogram> latency_;                  // route -> seconds
  uint64_t questions_ = 0;
  uint64_t prompt_tokens_ = 0;
  uint64_t shared_tokens_ = 0;
  uint64_t tokens_computed_ = 0;
  uint64_t dropped_ = 0;
  int64_t queue_depth_ = 0;
  Histogram round_requests_;
  Histogram round_tokens_;
  Histogram round_seconds_;
  Histogram queue_wait_seconds_;
};

}  // namespace flide::server
