// CudaOps per-op replay (Ops::set_op_capture, replay_ops): each op of a round captured into a
// CUDA graph of its own, then each op name's graphs launched again and again alone, so that a
// sampler of the GPU's energy counter beside the process can split a round's joules by op
// (bench/energy_by_op.py). Under the power limit a round's time is its energy over the limit, so
// an op's joules, not its time alone, say what cutting it would gain
// (bench/results/2026-12-01-pv-n256-conv-packed.md).
//
// Why a graph per op, not the round's graph with the other ops' nodes switched off
// (cudaGraphNodeSetEnabled): that crashed the driver in cuGraphLaunch on the 0.8B model's round
// (not on the test checkpoint's), whose graph holds cuBLASLt's kernels at programmatic edges,
// the likeliest cause. A graph per op switches nothing off, and no edge crosses between ops.
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace flide {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void CudaOps::set_op_capture(bool enable) {
  FLIDE_CHECK(!op_capturing_, "set_op_capture: an op is being captured");
  if (enable) {
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    drop_op_graphs();
  }
  op_capture_ = enable;
}

void CudaOps::op_capture_begin() {
  begin_capture();
  op_capturing_ = true;
}

void CudaOps::op_capture_end(const char* op) {
  op_capturing_ = false;
  const cudaGraphExec_t exec = end_capture();
  op_graphs_.emplace_back(op, exec);
  cuda_check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");  // the round goes on
}

void CudaOps::op_capture_abandon() noexcept {
  if (!op_capturing_) return;
  op_capturing_ = false;
  drop_capture();
}

void CudaOps::drop_op_graphs() noexcept {
  for (auto& [op, exec] : op_graphs_) cudaGraphExecDestroy(exec);
  op_graphs_.clear();
}

std::vector<Ops::OpReplay> CudaOps::replay_ops(double seconds) {
  FLIDE_CHECK(!op_capturing_, "replay_ops: an op is being captured");
  if (op_graphs_.empty()) return {};
  std::vector<std::string> names;  // in the order they were first called
  std::map<std::string, std::vector<cudaGraphExec_t>> groups;
  for (const auto& [op, exec] : op_graphs_) {
    if (!groups.count(op)) names.push_back(op);
    groups[op].push_back(exec);
  }
  std::vector<cudaGraphExec_t> all;
  for (const auto& [op, exec] : op_graphs_) all.push_back(exec);

  // The graphs in turn, again and again, in batches of about 50 ms (sized by the first pass),
  // waiting after each, until `seconds` have passed. No graphs: the GPU idle as long.
  const auto window = [&](const std::string& op, const std::vector<cudaGraphExec_t>& execs) {
    OpReplay r{op, int64_t(execs.size()), 0, 0, 0};
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    r.t0 = steady_seconds();
    if (execs.empty()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      r.t1 = steady_seconds();
      return r;
    }
    int64_t batch = 1;
    while (r.rounds == 0 || steady_seconds() - r.t0 < seconds) {
      for (int64_t i = 0; i < batch; ++i)
        for (cudaGraphExec_t exec : execs)
          cuda_check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
      cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      if (r.rounds == 0) {
        const double once = std::max(steady_seconds() - r.t0, 1e-6);
        batch = std::max<int64_t>(1, int64_t(std::ceil(0.05 / once)));
        r.rounds = 1;
      } else {
        r.rounds += batch;
      }
    }
    r.t1 = steady_seconds();
    return r;
  };

  std::vector<OpReplay> out;
  out.push_back(window("(none)", {}));
  for (const std::string& op : names) out.push_back(window(op, groups[op]));
  out.push_back(window("(all)", all));
  return out;
}

}  // namespace flide
