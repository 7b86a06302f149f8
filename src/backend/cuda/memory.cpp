// CudaOps: construction, the persistent and scratch arenas, host transfers through pinned
// staging (and the readbacks and tail mark of rounds in flight), and describe().
//
// Memory plan (STYLE.md #7): weights live in a persistent arena of large cudaMalloc blocks,
// zeroed once and never moved or reused. Activations and per-round state slots live in a bump
// scratch arena; it grows by whole blocks while a round runs (only the first rounds of a
// workload, each block at least doubling the capacity), and reset_scratch merges the blocks
// into one, so a steady workload stops calling cudaMalloc/cudaFree altogether. Frees happen
// only in reset_scratch, after the stream has drained.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/dense.h"

namespace flide {

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kPersistentBlockBytes = size_t(256) << 20;
constexpr size_t kScratchMinBlockBytes = size_t(64) << 20;
constexpr int64_t kTailMarkTag = 0x7a11;  // mark_tail's argument in a graph's fingerprint

size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

size_t view_bytes(const View& v) {
  return size_t(v.size()) * dtype_size(v.dtype);
}

double gib(size_t bytes) {
  return double(bytes) / double(size_t(1) << 30);
}

}  // namespace

void cuda_check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that it is reported once
  throw Error(cat("cuda backend: ", what, ": ", cudaGetErrorString(err)));
}

void* CudaOps::Arena::take(size_t bytes) {
  const size_t padded = align_up(bytes);
  if (block == nullptr || used + padded > cap) return nullptr;
  void* p = block + used;
  used += padded;
  return p;
}

void* CudaOps::add_block(Arena& arena, size_t bytes, bool zeroed, bool make_current) {
  ++memory_epoch_;
  bytes = align_up(std::max<size_t>(bytes, 1));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error(cat("cuda backend: cannot allocate ", bytes, " bytes of device memory (",
                    cudaGetErrorString(err), "; ", gib(free_b), " of ", gib(total_b),
                    " GiB free; weights arena ", gib(persistent_.total), " GiB, scratch ",
                    gib(scratch_.total), " GiB)"));
  }
  arena.blocks.push_back(p);
  arena.total += bytes;
  // Ordered before every later use of the block, all of which run on stream_.
  if (zeroed) cuda_check(cudaMemsetAsync(p, 0, bytes, stream_), "zeroing a weights block");
  if (make_current) {
    arena.block = static_cast<char*>(p);
    arena.used = 0;
    arena.cap = bytes;
  }
  return p;
}

CudaOps::CudaOps(int device, bool batch_invariant, Quantization quantization)
    : device_(device), batch_invariant_(batch_invariant), quantization_(quantization) {
  try {
    cuda_check(cudaSetDevice(device), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
#ifdef NDEBUG
    const char* env = std::getenv("FLIDE_CUDA_SYNC_CHECK");
    sync_check_ = env != nullptr && *env != '\0' && std::strcmp(env, "0") != 0;
#else
    sync_check_ = true;
#endif
    for (int i = 0; i < 2; ++i) {
      cuda_check(cudaMallocHost(&stage_host_[i], kStageBytes), "pinned staging buffer");
      cuda_check(cudaMalloc(&stage_dev_[i], kStageBytes), "device staging buffer");
      cuda_check(cudaEventCreateWithFlags(&stage_done_[i], cudaEventDisableTiming), "event");
    }
    cuda_check(cudaEventCreateWithFlags(&meta_done_, cudaEventDisableTiming), "event");
    cuda_check(cudaEventCreateWithFlags(&tail_, cudaEventDisableTiming), "event");
    for (ReadbackSlot& slot : readback_)
      cuda_check(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming), "event");
    const cublasStatus_t st = cublasLtCreate(&lt_);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw Error(cat("cuda backend: cublasLtCreate: ", cublasLtGetStatusString(st)));
    cuda_check(cudaMalloc(&gemm_workspace_, kGemmWorkspaceBytes), "cuBLASLt workspace");
    profile_from_env();
  } catch (...) {
    release();
    throw;
  }
}

CudaOps::~CudaOps() {
  profile_at_exit();
  release();
}

void CudaOps::release() noexcept {
  graph_abandon();
  op_capture_abandon();
  drop_op_graphs();
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& [key, graph] : graphs_cache_)
    if (graph.exec) cudaGraphExecDestroy(graph.exec);
  graphs_cache_.clear();
  for (auto& [key, plan] : gemm_lru_) destroy_plan(plan);
  gemm_lru_.clear();
  gemm_plans_.clear();
  if (lt_) cublasLtDestroy(lt_);
  lt_ = nullptr;
  if (blas_) cublasDestroy(blas_);
  blas_ = nullptr;
  for (Arena* arena : {&persistent_, &scratch_}) {
    for (void* p : arena->blocks) cudaFree(p);
    *arena = Arena{};
  }
  for (void* p :
       {gemm_workspace_, gdn_workspace_, norm_fp8_buf_, meta_dev_, stage_dev_[0], stage_dev_[1]})
    if (p) cudaFree(p);
  gdn_workspace_ = norm_fp8_buf_ = nullptr;
  gdn_workspace_cap_ = norm_fp8_cap_ = 0;
  for (void* p : {meta_host_, stage_host_[0], stage_host_[1]})
    if (p) cudaFreeHost(p);
  gemm_workspace_ = meta_dev_ = meta_host_ = nullptr;
  stage_dev_[0] = stage_dev_[1] = stage_host_[0] = stage_host_[1] = nullptr;
  for (cudaEvent_t e : {stage_done_[0], stage_done_[1], meta_done_, tail_})
    if (e) cudaEventDestroy(e);
  stage_done_[0] = stage_done_[1] = meta_done_ = tail_ = nullptr;
  for (ReadbackSlot& slot : readback_) {
    if (slot.host) cudaFreeHost(slot.host);
    if (slot.done) cudaEventDestroy(slot.done);
    slot = ReadbackSlot{};
  }
  profiling_ = false;
  profiler_.reset();
  if (stream_) cudaStreamDestroy(stream_);
  stream_ = nullptr;
  cudaGetLastError();  // leave no error behind for whoever runs next
}

View CudaOps::alloc(int64_t rows, int64_t cols) {
  FLIDE_CHECK(rows >= 0 && cols >= 0, "alloc(", rows, ", ", cols, ")");
  const size_t bytes = size_t(rows * cols) * sizeof(__nv_bfloat16);
  if (bytes == 0) return {nullptr, rows, cols, DType::DType_bf16};
  // A large tensor gets a dedicated block; the shared block stays current for small ones.
  if (bytes > kPersistentBlockBytes / 2)
    return {add_block(persistent_, bytes, true, false), rows, cols, DType::DType_bf16};
  void* p = persistent_.take(bytes);
  if (!p) {
    add_block(persistent_, kPersistentBlockBytes, true, true);
    p = persistent_.take(bytes);
  }
  return {p, rows, cols, DType::DType_bf16};
}

View CudaOps::scratch_bytes(int64_t rows, int64_t cols, DType dtype) {
  FLIDE_CHECK(rows >= 0 && cols >= 0, "scratch(", rows, ", ", cols, ")");
  const size_t bytes = size_t(rows * cols) * dtype_size(dtype);
  if (bytes == 0) return {nullptr, rows, cols, dtype};
  void* p = scratch_.take(bytes);
  if (!p) {  // grow: the next block at least doubles the capacity
    add_block(scratch_, std::max({bytes + kAlign, scratch_.total, kScratchMinBlockBytes}), false,
              true);
    p = scratch_.take(bytes);
  }
  return {p, rows, cols, dtype};
}

View CudaOps::scratch(int64_t rows, int64_t cols) {
  return scratch_bytes(rows, cols, DType::DType_bf16);
}

View CudaOps::scratch_f32(int64_t rows, int64_t cols) {
  return scratch_bytes(rows, cols, DType::DType_f32);
}

// When the arena grew after the mark, the newest block holds only what came after it: carving
// restarts there (the rest of the mark's block idles until reset merges). Going back to the
// mark's block instead would grow the arena again on every layer. One stream keeps reuse safe.
void CudaOps::scratch_rewind(const ScratchMark& mark) {
  scratch_.used = scratch_.block == mark.block ? size_t(mark.used) : 0;
}

void CudaOps::fill_scratch(uint8_t byte) {
  reset_scratch();  // one block, as the next round finds it
  if (scratch_.block)
    cuda_check(cudaMemsetAsync(scratch_.block, byte, scratch_.cap, stream_), "fill_scratch");
}

// Queued calls may still use the old buffer: the stream is drained first, and graphs holding the
// old address are retired by the epoch.
void CudaOps::grow(void*& buffer, size_t& cap, size_t need, const char* op) {
  if (need <= cap) return;
  FLIDE_CHECK(graph_mode_ == GraphMode::GraphMode_eager, "cuda ", op,
              ": a buffer must grow inside a graph (its bucket ran eagerly first)");
  ++memory_epoch_;
  cuda_check(cudaStreamSynchronize(stream_), cat(op, " (an earlier op failed)").c_str());
  if (buffer) cuda_check(cudaFree(buffer), cat(op, ": cudaFree").c_str());
  buffer = nullptr;
  const size_t bytes = std::max(need, 2 * cap);
  cap = 0;
  cuda_check(cudaMalloc(&buffer, bytes), cat(op, ": a buffer of ", bytes, " bytes").c_str());
  cap = bytes;
}

void CudaOps::reset_scratch() {
  norm_fp8_ = {};
  product_fp8_ = {};
  if (scratch_.blocks.size() > 1) {  // merge, so that the next round fits in one block
    cuda_check(cudaStreamSynchronize(stream_), "reset_scratch (an earlier op failed)");
    const size_t total = scratch_.total;
    for (void* p : scratch_.blocks) cuda_check(cudaFree(p), "reset_scratch: cudaFree");
    scratch_ = Arena{};
    add_block(scratch_, total, false, true);
  }
  scratch_.used = 0;
}

// bf16 views: the floats go through a pinned chunk to a device fp32 chunk and are rounded on
// the device (kernels::f32_to_bf16, round to nearest even); f32 views are copied as they are.
// The function returns once `src` has been read (into pinned memory); the device work stays
// queued on the stream.
void CudaOps::upload(View dst, const float* src) {
  FLIDE_CHECK(graph_mode_ == GraphMode::GraphMode_eager, "cuda upload inside a graphed round");
  FLIDE_CHECK(dst.dtype == DType::DType_bf16 || dst.dtype == DType::DType_f32,
              "cuda upload into a ", dtype_name(dst.dtype), " view");
  const int64_t n = dst.size();
  if (n == 0) return;
  FLIDE_CHECK(dst.data != nullptr && src != nullptr);
  const int64_t chunk = int64_t(kStageBytes / sizeof(float));
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t len = std::min(chunk, n - off);
    const int i = stage_next_;
    stage_next_ ^= 1;
    cuda_check(cudaEventSynchronize(stage_done_[i]), "upload (an earlier op failed)");
    std::memcpy(stage_host_[i], src + off, size_t(len) * sizeof(float));
    if (dst.dtype == DType::DType_f32) {
      cuda_check(cudaMemcpyAsync(static_cast<float*>(dst.data) + off, stage_host_[i],
                                 size_t(len) * sizeof(float), cudaMemcpyHostToDevice, stream_),
                 "upload: cudaMemcpyAsync");
    } else {
      cuda_check(cudaMemcpyAsync(stage_dev_[i], stage_host_[i], size_t(len) * sizeof(float),
                                 cudaMemcpyHostToDevice, stream_),
                 "upload: cudaMemcpyAsync");
      launched(kernels::f32_to_bf16(static_cast<const float*>(stage_dev_[i]),
                                    static_cast<__nv_bfloat16*>(dst.data) + off, len, stream_),
               "upload (f32_to_bf16)");
    }
    cuda_check(cudaEventRecord(stage_done_[i], stream_), "upload: cudaEventRecord");
  }
}

// Waits for everything queued before it: a fault of any earlier op surfaces here.
void CudaOps::download(View src, double* dst) {
  FLIDE_CHECK(src.dtype == DType::DType_bf16 || src.dtype == DType::DType_f32,
              "cuda download from a ", dtype_name(src.dtype), " view");
  graph_round_end();
  const int64_t n = src.size();
  if (n == 0) return;
  FLIDE_CHECK(src.data != nullptr && dst != nullptr);
  const size_t elem = dtype_size(src.dtype);
  const int64_t chunk = int64_t(kStageBytes / elem);
  // The pinned chunk may still be the source of a queued upload copy; the copy below is
  // ordered after it on the stream, and the host reads the chunk only after the stream drains.
  void* host = stage_host_[0];
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t len = std::min(chunk, n - off);
    if (profiling_) profiler_->begin(0, 0, 0);
    cuda_check(cudaMemcpyAsync(host, static_cast<const char*>(src.data) + size_t(off) * elem,
                               size_t(len) * elem, cudaMemcpyDeviceToHost, stream_),
               "download: cudaMemcpyAsync");
    op_end("download");
    cuda_check(cudaStreamSynchronize(stream_),
               "download (an earlier op failed; FLIDE_CUDA_SYNC_CHECK=1 names it)");
    if (src.dtype == DType::DType_f32) {
      const float* h = static_cast<const float*>(host);
      for (int64_t i = 0; i < len; ++i) dst[off + i] = double(h[i]);
    } else {
      const uint16_t* h = static_cast<const uint16_t*>(host);
      for (int64_t i = 0; i < len; ++i) dst[off + i] = double(bf16_to_f32(h[i]));
    }
  }
  if (profiling_) profiler_->resolve();  // the stream has drained: the round ends here
}

// Ends the round's graph like download, then copies into the next free pinned slot without
// waiting: the slot's event says when fetch may read it.
Readback CudaOps::download_async(View src) {
  FLIDE_CHECK(src.dtype == DType::DType_f32, "cuda download_async from a ", dtype_name(src.dtype),
              " view");
  graph_round_end();
  Readback r;
  r.count = src.size();
  if (r.count == 0) return r;
  FLIDE_CHECK(src.data != nullptr);
  int i = readback_next_;
  for (int tried = 0; readback_[i].held; i = (i + 1) % kReadbackSlots)
    FLIDE_CHECK(++tried < kReadbackSlots, "cuda download_async: ", kReadbackSlots,
                " readbacks already wait to be fetched");
  readback_next_ = (i + 1) % kReadbackSlots;
  ReadbackSlot& slot = readback_[i];
  const size_t bytes = size_t(r.count) * sizeof(float);
  if (bytes > slot.bytes) {  // the slot's last copy was fetched, so it has landed
    const size_t cap = std::max(bytes, 2 * slot.bytes);
    if (slot.host) cuda_check(cudaFreeHost(slot.host), "download_async: cudaFreeHost");
    slot.host = nullptr;
    slot.bytes = 0;
    cuda_check(cudaMallocHost(&slot.host, cap), "download_async: pinned readback buffer");
    slot.bytes = cap;
  }
  if (profiling_) profiler_->begin(0, 0, 0);
  cuda_check(cudaMemcpyAsync(slot.host, src.data, bytes, cudaMemcpyDeviceToHost, stream_),
             "download_async: cudaMemcpyAsync");
  op_end("download");
  cuda_check(cudaEventRecord(slot.done, stream_), "download_async: cudaEventRecord");
  slot.held = true;
  r.slot = i;
  return r;
}

// Waits for everything queued before the copy: a fault of any earlier op surfaces here.
std::vector<double> CudaOps::fetch(Readback& r) {
  std::vector<double> out(size_t(r.count));
  if (r.slot < 0) return out;
  FLIDE_CHECK(r.slot < kReadbackSlots && readback_[r.slot].held, "cuda fetch: no such readback");
  ReadbackSlot& slot = readback_[r.slot];
  slot.held = false;
  r.slot = -1;
  cuda_check(cudaEventSynchronize(slot.done),
             "fetch (an earlier op failed; FLIDE_CUDA_SYNC_CHECK=1 names it)");
  const float* h = static_cast<const float*>(slot.host);
  for (int64_t i = 0; i < r.count; ++i) out[size_t(i)] = double(h[i]);
  if (profiling_) {  // the profiled round ends here; no other is queued behind it
    cuda_check(cudaStreamSynchronize(stream_), "fetch (an earlier op failed)");
    profiler_->resolve();
  }
  return out;
}

// Part of a graphed round like an op: captured as an external event record node (the host may
// wait on it) and fingerprinted on replay.
void CudaOps::mark_tail() {
  if (graph_mode_ != GraphMode::GraphMode_eager) {
    graph_fingerprint({}, {kTailMarkTag});
    if (graph_mode_ == GraphMode::GraphMode_replay) return;
  }
  const cudaError_t err = graph_mode_ == GraphMode::GraphMode_capture
                              ? cudaEventRecordWithFlags(tail_, stream_, cudaEventRecordExternal)
                              : cudaEventRecord(tail_, stream_);
  cuda_check(err, "mark_tail: cudaEventRecord");
}

void CudaOps::wait_tail() {
  cuda_check(cudaEventSynchronize(tail_),
             "wait_tail (an earlier op failed; FLIDE_CUDA_SYNC_CHECK=1 names it)");
}

void CudaOps::fill_zero(View dst) {
  FLIDE_CHECK(dst.dtype == DType::DType_bf16 || dst.dtype == DType::DType_f32,
              "cuda fill_zero of a ", dtype_name(dst.dtype), " view");
  if (dst.size() == 0) return;
  if (!op_begin({dst})) return;
  launched(cudaMemsetAsync(dst.data, 0, view_bytes(dst), stream_), "fill_zero");
}

void CudaOps::synchronize() {
  graph_round_end();
  cuda_check(cudaStreamSynchronize(stream_),
             "synchronize (an earlier op failed; FLIDE_CUDA_SYNC_CHECK=1 names it)");
  if (profiling_) profiler_->resolve();
}

void CudaOps::launched(cudaError_t err, const char* op) {
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    cudaGetLastError();
    op_capture_abandon();
    throw Error(cat("cuda backend: ", op, ": launch failed: ", cudaGetErrorString(err)));
  }
  op_end(op);
  if (!sync_check_ || graph_mode_ != GraphMode::GraphMode_eager) return;
  err = cudaStreamSynchronize(stream_);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(cat("cuda backend: ", op, ": ", cudaGetErrorString(err),
                    " (caught by the sync check right after this op)"));
  }
}

std::string CudaOps::describe() const {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device_) != cudaSuccess) {
    cudaGetLastError();
    return cat("CUDA device ", device_, " (properties unavailable)");
  }
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
  const size_t other = 2 * kStageBytes + kGemmWorkspaceBytes + meta_cap_ + gdn_workspace_cap_;
  char line[512];
  std::snprintf(line, sizeof line,
                "%s (device %d, sm_%d%d, %d SMs, %.1f GiB, %.1f GiB in use); flide bf16: "
                "weights arena %.2f GiB, scratch %.2f GiB, staging/metadata/workspace %.0f MiB%s",
                prop.name, device_, prop.major, prop.minor, prop.multiProcessorCount, gib(total_b),
                gib(total_b - free_b), gib(persistent_.total), gib(scratch_.total),
                double(other) / double(1 << 20), sync_check_ ? ", sync check on" : "");
  return line;
}

std::unique_ptr<Ops> make_cuda_ops(int device, bool batch_invariant, Quantization quantization) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(cat(
        "cuda backend: no usable CUDA device (cudaGetDeviceCount: ", cudaGetErrorString(err), ")"));
  }
  if (count == 0) throw Error("cuda backend: no CUDA device found");
  if (device < 0 || device >= count)
    throw Error(cat("cuda backend: CUDA device ", device, " does not exist (", count,
                    " device(s): 0..", count - 1, ")"));
  return std::make_unique<CudaOps>(device, batch_invariant, quantization);
}

}  // namespace flide
