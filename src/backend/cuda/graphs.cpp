// CudaOps CUDA graphs: one graph per capacity bucket of padded rounds (cuda_ops.h, "CUDA
// graphs"). A round's mode is chosen at the end of set_stream and ends at its first download
// or synchronize. Every op of a captured or replayed round folds its views and scalars into a
// fingerprint, so a replay whose ops differ from the capture (a bug: the model's op sequence
// is a function of the stream's sizes, which the bucket fixes) fails loudly instead of
// returning another round's numbers.
#include <cstring>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace flide {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {  // FNV-1a over the value's bytes
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

constexpr uint64_t kFingerprintSeed = 14695981039346656037ull;

}  // namespace

bool CudaOps::set_graphs(bool enable) {
  graphs_ = enable;
  return graphs_;
}

void CudaOps::graph_fingerprint(std::initializer_list<View> views,
                                std::initializer_list<int64_t> args) {
  uint64_t h = mix(op_hash_, uint64_t(op_count_));
  for (const View& v : views) {
    h = mix(h, uint64_t(reinterpret_cast<uintptr_t>(v.data)));
    h = mix(h, uint64_t(v.rows));
    h = mix(h, uint64_t(v.cols));
    h = mix(h, uint64_t(v.dtype));
  }
  for (int64_t a : args) h = mix(h, uint64_t(a));
  op_hash_ = h;
  ++op_count_;
}

void CudaOps::begin_capture() {
  cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed),
             "cudaStreamBeginCapture");
}

cudaGraphExec_t CudaOps::end_capture() {
  cudaGraph_t graph = nullptr;
  cuda_check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  cuda_check(err, "cudaGraphInstantiate");
  return exec;
}

void CudaOps::drop_capture() noexcept {
  if (!stream_) return;
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(stream_, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
  cudaGetLastError();
}

void CudaOps::graph_abandon() noexcept {
  if (graph_mode_ == GraphMode::GraphMode_capture) drop_capture();
  graph_mode_ = GraphMode::GraphMode_eager;
  graph_ = nullptr;
}

void CudaOps::graph_round_begin(const Stream& s) {
  graph_mode_ = GraphMode::GraphMode_eager;
  graph_ = nullptr;
  if (!s.padded()) return;
  const GraphKey key{s.n_tokens(),
                     s.node_capacity,
                     s.n_levels(),
                     s.n_slots,
                     int32_t(s.out_rows.size()),
                     int32_t(s.select_ids.size()),
                     window_in_place_};
  RoundGraph& g = graphs_cache_[key];
  if (graphs_ && !profiling_ && !op_capture_) {
    if (g.exec && g.epoch != memory_epoch_) {  // its addresses are stale
      cuda_check(cudaGraphExecDestroy(g.exec), "cudaGraphExecDestroy");
      g.exec = nullptr;
    }
    if (g.exec) {
      cuda_check(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch");
      graph_mode_ = GraphMode::GraphMode_replay;
      ++graph_stats_.replayed;
    } else if (g.seen) {  // arenas, workspaces and GEMM plans already have this bucket's sizes
      // Relaxed: the ops' host-side calls (cudaFuncSetAttribute, cuBLASLt's heuristics) stay
      // legal during the capture.
      begin_capture();
      graph_mode_ = GraphMode::GraphMode_capture;
      ++graph_stats_.captured;
    }
    if (graph_mode_ != GraphMode::GraphMode_eager) {
      graph_ = &g;
      op_hash_ = kFingerprintSeed;
      op_count_ = 0;
      return;
    }
  }
  g.seen = true;
  ++graph_stats_.eager;
}

void CudaOps::graph_round_end() {
  if (graph_mode_ == GraphMode::GraphMode_eager) return;
  RoundGraph& g = *graph_;
  const GraphMode mode = graph_mode_;
  graph_mode_ = GraphMode::GraphMode_eager;
  graph_ = nullptr;
  if (mode == GraphMode::GraphMode_replay) {
    FLIDE_CHECK(op_count_ == g.n_ops && op_hash_ == g.fingerprint,
                "cuda graphs: the replayed round issued ", op_count_, " ops that differ from the ",
                g.n_ops, " captured for its bucket");
    return;
  }
  g.exec = end_capture();
  g.epoch = memory_epoch_;  // allocations made during the capture are part of it
  g.fingerprint = op_hash_;
  g.n_ops = op_count_;
  cuda_check(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch");
}

}  // namespace flide
