// CudaProfiler: event pairs around each op, resolved when the stream has drained (profiler.h),
// and CudaOps' profiling members.
#include "backend/cuda/profiler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/cuda_ops.h"  // cuda_check

namespace flide {

namespace {

constexpr size_t kInitialPairs = 4096;

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void append(std::string& out, const char* format, auto... args) {
  char line[512];
  std::snprintf(line, sizeof line, format, args...);
  out += line;
}

}  // namespace

CudaProfiler::CudaProfiler(cudaStream_t stream) : stream_(stream), last_wait_(Clock::now()) {
  try {
    grow(kInitialPairs);
  } catch (...) {
    for (cudaEvent_t e : start_) cudaEventDestroy(e);
    for (cudaEvent_t e : end_) cudaEventDestroy(e);
    throw;
  }
  pending_.reserve(kInitialPairs);
}

CudaProfiler::~CudaProfiler() {
  for (cudaEvent_t e : start_) cudaEventDestroy(e);
  for (cudaEvent_t e : end_) cudaEventDestroy(e);
}

void CudaProfiler::grow(size_t pairs) {
  start_.reserve(pairs);
  end_.reserve(pairs);
  while (start_.size() < pairs) {
    cudaEvent_t a = nullptr, b = nullptr;
    cuda_check(cudaEventCreate(&a), "profiler: cudaEventCreate");
    start_.push_back(a);
    cuda_check(cudaEventCreate(&b), "profiler: cudaEventCreate");
    end_.push_back(b);
  }
}

void CudaProfiler::begin(int64_t m, int64_t n, int64_t k) {
  const Clock::time_point t0 = Clock::now();
  if (pending_.empty() && !open_) round_lead_in_ms_ = ms_between(last_wait_, t0);
  const size_t slot = pending_.size();  // an open pair (its op failed to launch) is reused
  if (slot >= start_.size()) {          // inside the round: noted in the report
    grow(2 * start_.size());
    grew_this_round_ = true;
  }
  cuda_check(cudaEventRecord(start_[slot], stream_), "profiler: cudaEventRecord");
  open_ = true;
  open_m_ = m;
  open_n_ = n;
  open_k_ = k;
  open_at_ = Clock::now();
  overhead_us_ += 1e3 * ms_between(t0, open_at_);
}

void CudaProfiler::end(const char* op) {
  if (!open_) return;
  const Clock::time_point t0 = Clock::now();
  const int slot = int(pending_.size());
  cuda_check(cudaEventRecord(end_[size_t(slot)], stream_), "profiler: cudaEventRecord");
  open_ = false;
  pending_.push_back({op, open_m_, open_n_, open_k_, slot, 1e3 * ms_between(open_at_, t0)});
  overhead_us_ += 1e3 * ms_between(t0, Clock::now());
}

void CudaProfiler::resolve() {
  open_ = false;  // an op that threw between begin and end
  if (pending_.empty()) {
    last_wait_ = Clock::now();
    return;
  }
  // The caller has waited for the stream; this only makes sure of the last event.
  cuda_check(cudaEventSynchronize(end_[size_t(pending_.back().slot)]),
             "profiler: cudaEventSynchronize");
  const cudaEvent_t first = start_[size_t(pending_.front().slot)];
  float prev_end = 0;
  double round_ops = 0;
  std::string label;
  for (size_t i = 0; i < pending_.size(); ++i) {
    const Pending& p = pending_[i];
    float t_start = 0, t_end = 0;  // ms after the round's first event
    cuda_check(cudaEventElapsedTime(&t_start, first, start_[size_t(p.slot)]),
               "profiler: cudaEventElapsedTime");
    cuda_check(cudaEventElapsedTime(&t_end, first, end_[size_t(p.slot)]),
               "profiler: cudaEventElapsedTime");
    label = p.op;
    if (p.m || p.n || p.k) {
      char shape[96];
      std::snprintf(shape, sizeof shape, " %lldx%lldx%lld", (long long)p.m, (long long)p.n,
                    (long long)p.k);
      label += shape;
    }
    Totals& t = ops_[label];
    if (t.calls == 0) {
      t.op = p.op;
      t.m = p.m;
      t.n = p.n;
      t.k = p.k;
    }
    t.calls += 1;
    t.ms += double(t_end - t_start);
    if (i > 0) t.gap_ms += double(t_start - prev_end);
    t.host_us += p.host_us;
    round_ops += double(t_end - t_start);
    prev_end = t_end;
  }
  rounds_ += 1;
  wall_ms_ += double(prev_end);
  op_ms_ += round_ops;
  lead_in_ms_ += round_lead_in_ms_;
  max_ops_per_round_ = std::max(max_ops_per_round_, int64_t(pending_.size()));
  if (grew_this_round_) grown_in_round_ += 1;
  grew_this_round_ = false;
  // Room for the next rounds, grown here rather than while one is being timed.
  if (4 * pending_.size() > 3 * start_.size()) grow(2 * start_.size());
  pending_.clear();
  last_wait_ = Clock::now();
}

void CudaProfiler::reset() {
  pending_.clear();
  open_ = false;
  ops_.clear();
  rounds_ = max_ops_per_round_ = grown_in_round_ = 0;
  wall_ms_ = op_ms_ = lead_in_ms_ = overhead_us_ = 0;
  grew_this_round_ = false;
  last_wait_ = Clock::now();
}

std::string CudaProfiler::report() const {
  std::string out;
  if (rounds_ == 0) {
    out =
        "flide cuda profile: no round recorded (profiling on? a round ends at synchronize() "
        "or download())\n";
    return out;
  }
  const double R = double(rounds_);
  int64_t calls = 0;
  for (const auto& [label, t] : ops_) calls += t.calls;
  const double gaps = wall_ms_ - op_ms_;
  const auto pct = [&](double ms) { return wall_ms_ > 0 ? 100.0 * ms / wall_ms_ : 0.0; };

  append(out,
         "flide cuda profile: %lld round(s) (a round: the ops between two waits for the stream, "
         "i.e. one forward), %.1f ops/round (max %lld)\n",
         (long long)rounds_, double(calls) / R, (long long)max_ops_per_round_);
  append(out,
         "per round: GPU wall %.3f ms = ops %.3f ms (%.1f%%) + GPU idle between ops %.3f ms "
         "(%.1f%%: host work and launch latency)\n",
         wall_ms_ / R, op_ms_ / R, pct(op_ms_), gaps / R, pct(gaps));
  append(out,
         "           host lead-in %.3f ms before the first op (stream assembly, set_stream; "
         "outside the wall); profiler host cost %.3f ms (inside the gaps)\n",
         lead_in_ms_ / R, overhead_us_ / 1e3 / R);
  if (grown_in_round_ > 0)
    append(out, "note: the event pool grew during %lld round(s); their gaps include it\n",
           (long long)grown_in_round_);

  // By op (matmul shapes merged), then matmul by shape.
  struct Row {
    std::string name;
    Totals t;
  };
  std::map<std::string, Totals> by_op;
  std::vector<Row> shapes;
  for (const auto& [label, t] : ops_) {
    if (t.m || t.n || t.k) shapes.push_back({label, t});
    Totals& s = by_op[t.op];
    s.calls += t.calls;
    s.ms += t.ms;
    s.gap_ms += t.gap_ms;
    s.host_us += t.host_us;
  }
  std::vector<Row> rows;
  for (const auto& [op, t] : by_op) rows.push_back({op, t});
  const auto by_time = [](const Row& a, const Row& b) { return a.t.ms > b.t.ms; };
  std::sort(rows.begin(), rows.end(), by_time);
  std::sort(shapes.begin(), shapes.end(), by_time);

  append(out, "\n%-24s %10s %9s %7s %11s %9s %12s %13s\n", "op", "total ms", "ms/round", "% wall",
         "calls/round", "us/call", "gap us/call", "host us/call");
  for (const Row& r : rows) {
    const double c = double(r.t.calls);
    append(out, "%-24s %10.3f %9.3f %6.1f%% %11.1f %9.2f %12.2f %13.2f\n", r.name.c_str(), r.t.ms,
           r.t.ms / R, pct(r.t.ms), c / R, 1e3 * r.t.ms / c, 1e3 * r.t.gap_ms / c, r.t.host_us / c);
  }
  append(out, "%-24s %10.3f %9.3f %6.1f%%\n", "(gaps: GPU idle)", gaps, gaps / R, pct(gaps));

  if (!shapes.empty()) {
    append(out, "\n%-32s %10s %9s %7s %11s %9s %9s\n", "matmul M x N x K (w is [N, K])", "total ms",
           "ms/round", "% wall", "calls/round", "us/call", "TFLOP/s");
    for (const Row& r : shapes) {
      const double c = double(r.t.calls);
      const double flop = 2.0 * double(r.t.m) * double(r.t.n) * double(r.t.k) * c;
      append(out, "%-32s %10.3f %9.3f %6.1f%% %11.1f %9.2f %9.1f\n", r.name.c_str(), r.t.ms,
             r.t.ms / R, pct(r.t.ms), c / R, 1e3 * r.t.ms / c,
             r.t.ms > 0 ? flop / (r.t.ms * 1e-3) / 1e12 : 0.0);
    }
  }
  return out;
}

// ---- CudaOps ----

void CudaOps::set_profiling(bool enable) {
  if (enable == profiling_) return;
  if (enable) {
    if (profiler_)
      profiler_->reset();
    else
      profiler_ = std::make_unique<CudaProfiler>(stream_);
    profiling_ = true;
    return;
  }
  if (profiler_->pending()) {  // close the round in flight so that the report counts it
    cuda_check(cudaStreamSynchronize(stream_), "set_profiling (an earlier op failed)");
    profiler_->resolve();
  }
  profiling_ = false;
}

std::string CudaOps::profile_report() {
  if (!profiler_)
    return "flide cuda profile: profiling was never on (set_profiling, FLIDE_PROFILE=1)\n";
  if (profiler_->pending()) {
    cuda_check(cudaStreamSynchronize(stream_), "profile_report (an earlier op failed)");
    profiler_->resolve();
  }
  return profiler_->report();
}

void CudaOps::reset_profile() {
  if (profiler_) profiler_->reset();
}

void CudaOps::profile_from_env() {
  const char* env = std::getenv("FLIDE_PROFILE");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0) return;
  set_profiling(true);
  profile_from_env_ = true;
}

void CudaOps::profile_at_exit() noexcept {
  if (!profile_from_env_ || !profiling_) return;
  try {
    const std::string report = profile_report();
    std::fprintf(stderr, "FLIDE_PROFILE:\n%s", report.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FLIDE_PROFILE: no report: %s\n", e.what());
  }
}

}  // namespace flide
