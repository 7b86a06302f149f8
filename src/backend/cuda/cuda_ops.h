// The CUDA backend (DESIGN.md "Backends"): bf16 activations and weights, fp32 accumulation
// inside every kernel and GEMM, fp32 recurrent state, gates and logits (scratch_f32). Each op
// checks its views' dtypes and shapes on the host and hands raw pointers to a launcher of
// src/kernels/ (STYLE.md #4); GEMMs go through cuBLASLt. Everything runs in order on one
// non-blocking stream that the backend owns; only download(), synchronize(), fetch() (a
// download_async's readback) and wait_tail() wait for it.
// The class is declared here and its members are spread over a few files by area:
//   memory.cpp         construction, make_cuda_ops, the persistent and scratch arenas, host
//                      transfers (pinned staging), describe()
//   stream_upload.cpp  set_stream: validates the round's Stream, uploads its arrays and builds
//                      the two tree-attention plans (Rows_all, Rows_out) in one pinned copy
//   gemm.cpp           matmul, matmul_add (cuBLASLt, descriptors and heuristics cached per shape)
//   cuda_ops.cpp       the other ops, one launcher each (and the delta rule's workspace); swiglu,
//                      gdn_qkv_conv and z_gated_rmsnorm run their fused GEMMs where the kernels
//                      take the shapes
//   profiler.cpp       set_profiling / profile_report: per-op GPU time (profiler.h)
//   graphs.cpp         set_graphs: one CUDA graph per capacity bucket of padded rounds
//   op_replay.cpp      set_op_capture / replay_ops: a graph per op, replayed op by op
//
// Errors: a launch that fails throws flide::Error naming the op and cudaGetErrorString. Kernel
// faults are asynchronous and surface at the next download(), synchronize() or fetch(); set the
// environment variable FLIDE_CUDA_SYNC_CHECK=1 (always on in builds without NDEBUG) to
// synchronize after every op, so that the error names the op that faulted. The sync check must stay
// off under CUDA-graph capture.
//
// CUDA graphs (graphs.cpp): with set_graphs(true), a padded round (Stream::padded) runs
// eagerly the first time its bucket is seen (so that arenas, workspaces and GEMM plans reach
// their size), is captured the second time, and replays the graph from then on. The model's
// forward is unchanged: in a replayed round the graph is launched at the end of set_stream and
// every op only checks itself against the op captured at its place (a fingerprint of its
// views), which the first download/synchronize verifies; nothing is launched per op. A graph
// holds raw addresses, so any reallocation of scratch, metadata or workspace (memory_epoch_)
// retires every graph, and the bucket is captured again.
//
// One CudaOps per device and host thread: the constructor makes its device current
// (cudaSetDevice) and the ops assume it stays current.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/profiler.h"
#include "backend/ops.h"
#include "backend/stream.h"
#include "kernels/attention.h"
#include "kernels/dense.h"
#include "kernels/tree_meta.h"

namespace flide {

// Throws flide::Error("cuda backend: <what>: <cudaGetErrorString>") unless err is cudaSuccess.
void cuda_check(cudaError_t err, const char* what);

class CudaOps final : public Ops {
 public:
  // The device must exist (make_cuda_ops checks); batch_invariant, quantization: make_cuda_ops.
  CudaOps(int device, bool batch_invariant, Quantization quantization);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  DType dtype() const override { return DType::DType_bf16; }

  View alloc(int64_t rows, int64_t cols) override;
  View scratch(int64_t rows, int64_t cols) override;
  View scratch_f32(int64_t rows, int64_t cols) override;
  void reset_scratch() override;
  ScratchMark scratch_mark() const override { return {scratch_.block, int64_t(scratch_.used)}; }
  void scratch_rewind(const ScratchMark& mark) override;
  // Sets every byte of the scratch arena to `byte`, queued on the stream (0xFF reads as NaN in
  // bf16, f32 and e4m3): for tests that check no result depends on what no op of its round wrote.
  void fill_scratch(uint8_t byte);
  void upload(View dst, const float* src) override;
  void download(View src, double* dst) override;
  void fill_zero(View dst) override;
  void set_stream(const Stream& stream) override;
  void synchronize() override;
  void quantize_weight(View w) override;         // fp8.cpp
  void quantize_output_weight(View w) override;  // fp8.cpp

  bool asynchronous() const override { return true; }
  Readback download_async(View src) override;
  std::vector<double> fetch(Readback& readback) override;
  void mark_tail() override;
  void wait_tail() override;

  void embed(View table, View out) override;
  void rmsnorm(View x, View w, View out, double eps, bool unit_offset) override;
  void rmsnorm_into_products(View x, View w, View out, double eps,
                             bool unit_offset) override;  // fp8.cpp
  void matmul(View x, View w, View out) override;
  void matmul_add(View x, View w, View acc) override;
  void silu_mul(View gate, View up, View out) override;
  void swiglu(View x, View w_gate, View w_up, View out) override;
  void swiglu_into_product(View x, View w_gate, View w_up, View out, View w_next) override;
  void sigmoid_mul(View x, View gate) override;
  void gather_rows(View x, View out) override;

  void attention_query(View qg, View norm, View q, View gate, Rows which, int heads, int head_dim,
                       int rot_dim, double theta, double eps) override;
  void attention_key(View k, View norm, int heads, int head_dim, int rot_dim, double theta,
                     double eps) override;
  void attention(View q, View k, View v, View out, Rows which, int heads_q, int heads_kv,
                 int head_dim, double scale) override;
  void attention_gated(View q, View gate, View k, View v, View out, Rows which, int heads_q,
                       int heads_kv, int head_dim, double scale) override;
  void gated_attention(View qg, View q_norm, View k, View v, View out, Rows which, int heads_q,
                       int heads_kv, int head_dim, int rot_dim, double theta, double eps,
                       double scale) override;
  void attention_projections(View h, View w_q, View w_k, View w_v, View q_norm, View k_norm, View q,
                             View gate, View k, View v, int heads_q, int heads_kv, int head_dim,
                             int rot_dim, double theta, double eps) override;

  void gdn_qkv_conv(View x, View w_qkv, View w_conv, View window, View q, View k, View v, int dim_k,
                    double eps, int n_levels) override;
  void z_gated_rmsnorm(View o, View h, View w_z, View w, View out, double eps) override;
  void z_gated_rmsnorm_into_product(View o, View h, View w_z, View w, View out, double eps,
                                    View w_next) override;
  void gdn_conv(View x, View w, View window, View q, View k, View v, int dim_k, double eps,
                int level) override;
  void gdn_gates(View ab, View A_log, View dt_bias, View g, View beta) override;
  // Both forms run the chunked kernel: there is no token-by-token CUDA kernel for prefill (the
  // two forms are the same function up to rounding; the CPU backend keeps both to check that).
  void gdn(View q, View k, View v, View g, View beta, View state, View out, int level, int heads_k,
           int heads_v, int dim_k, int dim_v, GdnForm form) override;
  void gated_rmsnorm(View o, View z, View w, View out, double eps) override;

  void select_logits(View h, View w, View out) override;

  // Per-op GPU time (profiler.h). Turning it on starts a fresh profile (the first time, it
  // creates the event pool); turning it off keeps the totals for profile_report, which waits
  // for the stream if ops are still pending. Also on from construction when the environment
  // variable FLIDE_PROFILE=1: then the report goes to stderr when the backend is destroyed, if
  // profiling is still on. When off, an op pays one bool test.
  bool set_graphs(bool enable) override;
  void set_profiling(bool enable) override;
  std::string profile_report() override;
  void reset_profile();

  // How padded rounds ran since construction (graphs.cpp): eagerly (graphs off, profiling, op
  // capture, or the first round of a bucket), captured, or replayed.
  struct GraphStats {
    int64_t eager = 0;
    int64_t captured = 0;
    int64_t replayed = 0;
  };
  const GraphStats& graph_stats() const { return graph_stats_; }

  // Ops::set_op_capture / replay_ops (op_replay.cpp). Keep profiling off meanwhile: its events
  // would land in the ops' graphs.
  void set_op_capture(bool enable) override;
  std::vector<OpReplay> replay_ops(double seconds) override;

  // GEMM plans held now (gemm.cpp): at most kGemmPlans.
  size_t gemm_plans_cached() const { return gemm_plans_.size(); }
  static constexpr size_t kGemmPlans = 1024;
  // In batch-invariant mode, GEMMs of fewer rows run the algorithm cuBLASLt picks for this
  // many (gemm.cpp).
  static constexpr int64_t kGemmPinRows = 2048;

  // One line for the CLI: device name, SMs, memory, and what the backend holds.
  std::string describe() const;
  cudaStream_t stream() const { return stream_; }

 private:
  // A bump allocator over cudaMalloc'ed blocks; pieces are 256-byte aligned (cuBLASLt's
  // preferred alignment, and enough for any vector load).
  struct Arena {
    std::vector<void*> blocks;  // owned, cudaFree'd by the backend
    char* block = nullptr;      // the block carved from now
    size_t used = 0;            // bytes of `block` handed out
    size_t cap = 0;             // bytes in `block`
    size_t total = 0;           // bytes over all blocks
    void* take(size_t bytes);   // nullptr when `block` has no room
  };
  void* add_block(Arena& arena, size_t bytes, bool zeroed, bool make_current);
  void release() noexcept;  // frees everything (destructor, failed constructor)
  View scratch_bytes(int64_t rows, int64_t cols, DType dtype);

  // Launch bookkeeping: throws on a failed launch (err, or the runtime's last error), and in
  // sync-check mode waits for the op and throws on its fault.
  void launched(cudaError_t err, const char* op);
  // Host-side checks shared by the ops.
  void need_stream(const char* op) const;
  int64_t rows_of(Rows which) const;
  const int32_t* rows_ptr(Rows which) const;  // device q_rows for `which` (nullptr: all rows)
  // The keys' split for an attention over `which` rows (cuda_ops.cpp), its records in scratch;
  // none for every row.
  kernels::AttentionSplit out_rows_split(Rows which, int64_t R, int heads_q, int head_dim);
  // A tree op's output [T, cols] on a padded round: zeros on the rows of no node (stream.h),
  // which the op's kernels skip. Part of the op that calls it, and of its graph.
  cudaError_t zero_padding_rows(__nv_bfloat16* out, int64_t cols);
  // attention and attention_gated (gate: nullptr, or the packed gate).
  void run_attention(const char* name, View q, const View* gate, View k, View v, View out,
                     Rows which, int heads_q, int heads_kv, int head_dim, double scale);
  void check_level(int level, const char* op) const;

  // Called by every op right before its launches with the views it reads and writes and the
  // scalars that shape it. Returns false when the round replays a graph, whose launches already
  // hold the op's; views and scalars feed the round's fingerprint (graphs.cpp). op_end (called
  // by launched) closes the profiler's pair; a matmul gives the profiler its shape m, n, k.
  bool op_begin(std::initializer_list<View> views, std::initializer_list<int64_t> args = {}) {
    return op_begin_shaped(views, args, 0, 0, 0);
  }
  bool op_begin_shaped(std::initializer_list<View> views, std::initializer_list<int64_t> args,
                       int64_t m, int64_t n, int64_t k) {
    if (graph_mode_ != GraphMode::GraphMode_eager) {
      graph_fingerprint(views, args);
      return graph_mode_ == GraphMode::GraphMode_capture;
    }
    if (op_capture_ && !op_capturing_) op_capture_begin();
    if (profiling_) profiler_->begin(m, n, k);
    return true;
  }
  void op_end(const char* op) {
    if (op_capturing_) op_capture_end(op);
    if (profiling_) profiler_->end(op);
  }
  // op_replay.cpp: while op_capture_, op_begin opens a capture of the op's launches, and op_end
  // closes it, keeps the instantiated graph and launches it.
  void op_capture_begin();
  void op_capture_end(const char* op);
  void op_capture_abandon() noexcept;  // a failed launch's open capture
  void drop_op_graphs() noexcept;
  bool op_capture_ = false;
  bool op_capturing_ = false;  // between an op's op_begin and its op_end
  std::vector<std::pair<std::string, cudaGraphExec_t>> op_graphs_;  // in call order
  void profile_from_env();                                          // constructor: FLIDE_PROFILE
  void profile_at_exit() noexcept;  // destructor: the report to stderr (FLIDE_PROFILE)

  // CUDA graphs (graphs.cpp).
  enum class GraphMode : uint8_t { GraphMode_eager, GraphMode_capture, GraphMode_replay };
  // A padded round's sizes: tokens, node capacity, levels, slots, out rows, selects.
  // (tokens, node capacity, levels, slots, out rows, selects, whether a node reads and writes one
  // window slot: gdn_qkv_conv then runs unfused)
  using GraphKey = std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, bool>;
  struct RoundGraph {
    bool seen = false;               // a round of this bucket ran eagerly
    cudaGraphExec_t exec = nullptr;  // the captured round, once there is one
    uint64_t epoch = 0;              // memory_epoch_ the graph's addresses belong to
    uint64_t fingerprint = 0;        // of the captured ops' views, in order
    int64_t n_ops = 0;
  };
  void graph_round_begin(const Stream& s);  // end of set_stream: eager, capture or replay
  void graph_round_end();                   // first download/synchronize of the round
  void graph_abandon() noexcept;            // a capture left open by a failed round
  // The stream's capture (relaxed: the ops' host-side calls stay legal during it) begun, ended
  // and instantiated, or ended and dropped (after a failure); shared with op_replay.cpp.
  void begin_capture();
  cudaGraphExec_t end_capture();
  void drop_capture() noexcept;
  void graph_fingerprint(std::initializer_list<View> views, std::initializer_list<int64_t> args);
  bool graphs_ = false;
  GraphMode graph_mode_ = GraphMode::GraphMode_eager;
  RoundGraph* graph_ = nullptr;  // the round's entry in graphs_cache_ (capture or replay)
  uint64_t op_hash_ = 0;
  int64_t op_count_ = 0;
  uint64_t memory_epoch_ = 0;  // bumped by every (re)allocation a graph could point into
  std::map<GraphKey, RoundGraph> graphs_cache_;
  GraphStats graph_stats_;

  int device_ = 0;
  bool batch_invariant_ = false;  // make_cuda_ops; gemm.cpp

  // FP8 products (fp8.cpp). quantize_weight keeps each named weight's e4m3 copy and row scales
  // in the persistent arena, keyed by the bf16 weight's address (the bf16 copy stays: the
  // unfused paths and the last layer's plain products read it).
  Quantization quantization_ = Quantization::Quantization_none;
  std::map<const void*, kernels::Fp8Rows> fp8_weights_;
  // Whether w gets an FP8 copy at all: the FP8 mode and a non-empty weight (bf16, or Error
  // naming op).
  bool wants_fp8_copy(View w, const char* op) const;
  // w's e4m3 copy and `scales` float scales, in the persistent arena, made by `quantize`
  // (kernels::quantize_rows_fp8 or quantize_tiles_fp8).
  using Fp8Quantizer = cudaError_t (*)(const __nv_bfloat16*, int64_t, int64_t, uint8_t*, float*,
                                       cudaStream_t);
  std::pair<const uint8_t*, const float*> fp8_copy(View w, int64_t scales, Fp8Quantizer quantize,
                                                   const char* op);
  // w's FP8 copy, or {} (no copy: the op runs in bf16).
  kernels::Fp8Rows fp8_weight(View w) const;
  // x [rows, cols] in FP8 for a product: the latest rmsnorm_into_products' output when x is that
  // very view, else quantized into scratch (an op of its own, "quantize_fp8").
  kernels::Fp8Rows quantized(View x);
  // The FP8 form rmsnorm_into_products wrote beside its output (rows x cols bytes, then the row
  // scales) in one buffer of its own, which the next such norm overwrites: the model reads
  // each norm's output before it makes the next. Cleared by set_stream and reset_scratch.
  struct NormFp8 {
    const void* of = nullptr;  // the norm's output
    int64_t rows = 0, cols = 0;
  };
  NormFp8 norm_fp8_;
  void* norm_fp8_buf_ = nullptr;
  size_t norm_fp8_cap_ = 0;
  // The FP8 output projections (fp8.cpp, gemm.cpp). quantize_output_weight keeps each named
  // weight's e4m3 copy with a scale per 128 x 128 tile (kernels::quantize_tiles_fp8), keyed as
  // fp8_weights_. swiglu_into_product and z_gated_rmsnorm_into_product, where their FP8 kernels
  // run and w_next has that copy, write their output as kernels::Fp8Blocks into scratch
  // (product_input_fp8) and not in bf16; the matmul_add that reads the output then runs on the
  // two FP8 forms (cuBLASLt's VEC128_32F x BLK128x128_32F block scales, fp32 accumulation).
  struct Fp8Tiles {
    const uint8_t* data = nullptr;
    const float* scale = nullptr;  // [rows / 128, kernels::fp8_tile_scale_ld(cols)]
  };
  std::map<const void*, Fp8Tiles> fp8_output_weights_;
  struct ProductFp8 {
    const void* of = nullptr;  // the producer's out, whose bf16 was not written
    int64_t rows = 0, cols = 0;
    const void* w_next = nullptr;
    Fp8Tiles w_next_tiles;  // its fp8_output_weights_ copy
    kernels::Fp8Blocks form;
  };
  ProductFp8 product_fp8_;  // cleared by set_stream and reset_scratch
  // out's FP8 form for matmul_add(out, w_next, ...), in scratch, or {} (w_next has no copy, or
  // cuBLASLt no algorithm for the shape: the producer writes bf16).
  kernels::Fp8Blocks product_input_fp8(View out, View w_next);
  // swiglu and swiglu_into_product (w_next: nullptr for the former).
  void swiglu_writing(View x, View w_gate, View w_up, View out, const View* w_next);
  void z_gated_writing(View o, View h, View w_z, View w, View out, double eps, const View* w_next);
  cudaStream_t stream_ = nullptr;
  bool sync_check_ = false;
  bool profiling_ = false;
  bool profile_from_env_ = false;
  std::unique_ptr<CudaProfiler> profiler_;  // made when profiling is first turned on

  Arena persistent_;
  Arena scratch_;

  // Host transfers go through pinned chunks: upload alternates two chunks (the host fills one
  // while the device converts the other), download reuses the first.
  static constexpr size_t kStageBytes = size_t(16) << 20;
  void* stage_host_[2] = {nullptr, nullptr};  // pinned, kStageBytes each
  void* stage_dev_[2] = {nullptr, nullptr};   // device fp32 chunks for bf16 uploads
  cudaEvent_t stage_done_[2] = {nullptr, nullptr};
  int stage_next_ = 0;

  // Readbacks of rounds in flight (memory.cpp): each lands in a pinned slot of its own, grown
  // geometrically, with the event of its copy. `held` until fetched.
  static constexpr int kReadbackSlots = 4;
  struct ReadbackSlot {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
    bool held = false;
  };
  ReadbackSlot readback_[kReadbackSlots];
  int readback_next_ = 0;
  cudaEvent_t tail_ = nullptr;  // mark_tail's: the latest round reached its last layers

  // The round's metadata: int32 arrays and both attention plans, laid out in one pinned buffer
  // and copied to one device buffer with a single cudaMemcpyAsync. Both grow geometrically.
  void* meta_host_ = nullptr;
  void* meta_dev_ = nullptr;
  size_t meta_cap_ = 0;
  cudaEvent_t meta_done_ = nullptr;  // the last copy out of meta_host_ finished
  bool have_stream_ = false;
  kernels::TreeMeta meta_{};
  const int32_t* token_ids_ = nullptr;   // device [T]
  const int32_t* select_out_ = nullptr;  // device [M]
  const int32_t* select_ids_ = nullptr;  // device [M]
  const void* plan_all_ = nullptr;       // device plan for q_rows = all rows
  const void* plan_out_ = nullptr;       // device plan for q_rows = out_rows
  int32_t tiles_all_ = 0, tiles_out_ = 0;
  int32_t n_levels_ = 0, n_slots_ = 0, n_out_ = 0, n_select_ = 0;
  bool window_in_place_ = false;  // some node reads and writes the same slot
  bool padded_ = false;           // Stream::padded: rows of no node may follow the real ones
  int32_t max_token_id_ = -1, max_select_id_ = -1;

  // Device scratch of the chunked delta rule (kernels::gdn_workspace_bytes): nothing in it
  // outlives a call, so one buffer serves every layer and level. It grows (synchronising the
  // stream to free the old one) when a call needs more, i.e. in the first round of a size.
  void* gdn_workspace_ = nullptr;
  size_t gdn_workspace_cap_ = 0;
  // buffer to at least `need` bytes (at least doubling), in eager mode only (memory.cpp).
  void grow(void*& buffer, size_t& cap, size_t need, const char* op);

  // cuBLASLt: one handle, a 32 MiB workspace, and per shape its descriptors and chosen algo.
  // A shape for which cuBLASLt's heuristic offers no algorithm runs through cublasGemmEx
  // instead (same math: bf16 inputs, fp32 compute), on a handle made when first needed.
  static constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;
  struct GemmPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool gemm_ex = false;  // the cublasGemmEx fallback
  };
  // The operands' form: bf16, or FP8 with block scales (product_fp8_'s x, fp8_output_weights_'s w).
  enum class GemmOperands : uint8_t { GemmOperands_bf16, GemmOperands_fp8_blocks };
  // (M, N, K, out dtype, operands, alignment of x, w, out in bytes)
  using GemmKey = std::tuple<int64_t, int64_t, int64_t, int, GemmOperands, int, int, int>;
  const GemmPlan& gemm_plan(const GemmKey& key);
  // The key of acc[M, N] += x[M, K] . w[N, K]^T on FP8 blocks: the forms sit in the arenas
  // (256-byte aligned), acc is asked to be 16-byte aligned.
  static GemmKey fp8_blocks_key(int64_t M, int64_t N, int64_t K);
  // matmul (out = x . w^T) or, accumulating, matmul_add (out += x . w^T).
  void gemm(View x, View w, View out, bool accumulate);
  // matmul_add on product_fp8_ (x's form) and w's fp8_output_weights_ copy.
  void gemm_fp8_blocks(View x, View w, View acc);
  static void destroy_plan(GemmPlan& plan) noexcept;
  cublasLtHandle_t lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;  // the fallback's handle
  void* gemm_workspace_ = nullptr;
  // The plans of the kGemmPlans most recently used shapes, most recent first: a server's rounds
  // bring a new row count M almost every time, and without a bound their plans would pile up
  // for as long as it runs.
  using GemmPlans = std::list<std::pair<GemmKey, GemmPlan>>;
  GemmPlans gemm_lru_;
  std::map<GemmKey, GemmPlans::iterator> gemm_plans_;
};

}  // namespace flide
