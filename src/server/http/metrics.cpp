// Prometheus text for the server's counters (see metrics.h).
#include "server/http/metrics.h"

#include <algorithm>
#include <charconv>

namespace flide::server {

namespace {

// Request latency: the tiny CPU model answers in milliseconds, a 4B model on a busy queue in
// seconds.
const std::vector<double> kSecondsBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                            0.5,   1,      2.5,   5,    10,    30,   60};
const std::vector<double> kRequestsBounds = {1, 2, 4, 8, 16, 32, 64, 128, 256};
const std::vector<double> kTokensBounds = {128,  256,   512,   1024,  2048,  4096,
                                           8192, 16384, 32768, 65536, 131072};

// Shortest text that reads back as the same double (Prometheus parses Go floats).
std::string number(double value) {
  char text[32];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return std::string(text, end);
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const char* name, double value) {
  out += std::string(name) + " " + number(value) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t bucket =
      size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= bounds_.size(); ++b) {
    cumulative += counts_[b];
    const std::string le = b < bounds_.size() ? number(bounds_[b]) : "+Inf";
    out += name + "_bucket{" + labels + "le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  // `labels` ends in a comma, ready for le=: the totals drop it.
  std::string braces;
  if (!labels.empty()) braces.append("{").append(labels, 0, labels.size() - 1).append("}");
  out += name + "_sum" + braces + " " + number(sum_) + "\n";
  out += name + "_count" + braces + " " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : round_requests_(kRequestsBounds),
      round_tokens_(kTokensBounds),
      round_seconds_(kSecondsBounds),
      queue_wait_seconds_(kSecondsBounds) {}

void Metrics::request_answered(const std::string& route, int status, double seconds) {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
  latency_.try_emplace(route, kSecondsBounds).first->second.observe(seconds);
}

void Metrics::round_done(const RoundReport& round) {
  const std::lock_guard<std::mutex> lock(mutex_);
  questions_ += uint64_t(round.questions);
  prompt_tokens_ += uint64_t(round.prompt_tokens);
  shared_tokens_ += uint64_t(round.shared_tokens);
  tokens_computed_ += uint64_t(round.tokens_computed);
  round_requests_.observe(double(round.requests));
  round_tokens_.observe(double(round.tokens_computed));
  round_seconds_.observe(round.seconds);
}

void Metrics::request_dropped() {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++dropped_;
}

void Metrics::queue_wait(double seconds) {
  const std::lock_guard<std::mutex> lock(mutex_);
  queue_wait_seconds_.observe(seconds);
}

void Metrics::set_queue_depth(int64_t depth) {
  const std::lock_guard<std::mutex> lock(mutex_);
  queue_depth_ = depth;
}

std::string Metrics::render() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  header(out, "flide_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, count] : requests_)
    out += "flide_requests_total{route=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  header(out, "flide_request_duration_seconds", "histogram",
         "Time from a request's arrival to its answer, by route.");
  for (const auto& [route, histogram] : latency_)
    histogram.render(out, "flide_request_duration_seconds", "route=\"" + route + "\",");
  header(out, "flide_questions_total", "counter", "Questions answered.");
  sample(out, "flide_questions_total", double(questions_));
  header(out, "flide_prompt_tokens_total", "counter",
         "Prompt tokens of answered requests (usage.input_tokens: a shared prefix once).");
  sample(out, "flide_prompt_tokens_total", double(prompt_tokens_));
  header(out, "flide_trunk_tokens_shared_total", "counter",
         "Trunk tokens that questions read from their request's shared context instead of "
         "recomputing them (0 in --mode independent).");
  sample(out, "flide_trunk_tokens_shared_total", double(shared_tokens_));
  header(out, "flide_tokens_computed_total", "counter", "Token rows the model computed.");
  sample(out, "flide_tokens_computed_total", double(tokens_computed_));
  header(out, "flide_requests_dropped_total", "counter",
         "Admitted requests dropped before their round because the client disconnected.");
  sample(out, "flide_requests_dropped_total", double(dropped_));
  header(out, "flide_queue_depth", "gauge", "Admitted requests waiting for a round.");
  sample(out, "flide_queue_depth", double(queue_depth_));
  header(out, "flide_round_requests", "histogram", "Requests per engine round.");
  round_requests_.render(out, "flide_round_requests", "");
  header(out, "flide_round_tokens", "histogram", "Token rows per engine round.");
  round_tokens_.render(out, "flide_round_tokens", "");
  header(out, "flide_round_duration_seconds", "histogram", "Model time per engine round.");
  round_seconds_.render(out, "flide_round_duration_seconds", "");
  header(out, "flide_queue_wait_seconds", "histogram",
         "Time from admission to the start of the request's round.");
  queue_wait_seconds_.render(out, "flide_queue_wait_seconds", "");
  return out;
}

}  // namespace flide::server
