// Per-op device time of the CUDA backend (CudaOps::set_profiling, FLIDE_PROFILE=1): where a
// forward's GPU time goes, op by op, and how much of it the GPU spends idle between ops.
//
// How: with profiling on, each op records a timing event on the backend stream right before
// its launches and one right after (CudaOps::op_begin, and launched() closes the pair). The
// events come from a pool created when profiling is turned on (4096 pairs, doubled when a round
// needs more); nothing is read back until the host waits for the stream anyway, in
// synchronize() and download(), and there resolve() turns the round's events into times.
// A round is the work between two such waits: one forward (the forward ends with a download).
//
// What a round's numbers mean:
//   GPU wall   first op's start event to the last op's end event, = ops + gaps exactly.
//   op time    start to end event of one op. When the GPU is starved (it finishes each op
//              before the host has launched the next), the start event fires at once and the
//              op time includes the host's launch call (a few microseconds).
//   gap        the GPU idle between one op's end and the next op's start: host work between
//              launches (shape checks, plans, cuBLASLt heuristics on new shapes, syncs such as
//              the delta rule's workspace growth) and launch latency. Per op, the gap before it.
//   host       host microseconds inside the op's launch calls (launch API cost).
//   lead-in    host time from the previous wait to the round's first op (stream assembly,
//              reset_scratch, set_stream's planning and metadata copy): not in the GPU wall.
// The profiler's own host cost (two cudaEventRecord per op) lands in the gaps; the report
// states it. Profiling must stay off under CUDA-graph capture.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flide {

class CudaProfiler {
 public:
  explicit CudaProfiler(cudaStream_t stream);  // creates the pool: only when profiling starts
  ~CudaProfiler();
  CudaProfiler(const CudaProfiler&) = delete;
  CudaProfiler& operator=(const CudaProfiler&) = delete;

  // An op's launches follow on the stream. m, n, k: a matmul's shape (M x N x K), else 0.
  void begin(int64_t m, int64_t n, int64_t k);
  // The op's launches are queued; closes the pair begin opened (nothing without one).
  void end(const char* op);
  // The stream has drained (synchronize, download): fold the pending ops into the totals.
  void resolve();
  // Drops every total and the pending ops (the pool stays).
  void reset();
  bool pending() const { return !pending_.empty(); }

  // The totals as a table, sorted by device time (profiler.h's header says what each means).
  std::string report() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    const char* op;  // a string literal
    int64_t m, n, k;
    int slot;        // events start_[slot], end_[slot]
    double host_us;  // inside the launch calls
  };
  struct Totals {
    const char* op = "";          // the op's name, without the shape
    int64_t m = 0, n = 0, k = 0;  // a matmul's shape
    int64_t calls = 0;
    double ms = 0;       // device time
    double gap_ms = 0;   // GPU idle right before the op
    double host_us = 0;  // launch calls
  };

  void grow(size_t pairs);

  cudaStream_t stream_;
  std::vector<cudaEvent_t> start_, end_;  // the pool, pairs by slot
  std::vector<Pending> pending_;          // this round's ops, slots 0, 1, ... in order
  bool open_ = false;
  int64_t open_m_ = 0, open_n_ = 0, open_k_ = 0;
  Clock::time_point open_at_{};
  Clock::time_point last_wait_;  // the last resolve (or construction/reset)
  double round_lead_in_ms_ = 0;  // of the round being recorded

  // Totals over the resolved rounds: per op label ("matmul MxNxK" for a matmul).
  std::map<std::string, Totals> ops_;
  int64_t rounds_ = 0;
  int64_t max_ops_per_round_ = 0;
  double wall_ms_ = 0, op_ms_ = 0, lead_in_ms_ = 0;
  double overhead_us_ = 0;      // the profiler's host time inside begin/end
  int64_t grown_in_round_ = 0;  // rounds during which the pool had to grow
  bool grew_this_round_ = false;
};

}  // namespace flide
