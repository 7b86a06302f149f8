// CpuOps: construction, the persistent and scratch arenas, host transfers and the round's stream
// (validated once here, so that the ops can index it without further checks).
#include "backend/cpu/cpu_ops.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>

namespace flide {

namespace {

// Persistent blocks are calloc'ed (zero pages, mapped lazily) and never reused, so every piece
// is already zero. Scratch blocks are malloc'ed: their contents are unspecified by contract.
constexpr int64_t kBlockBytes = int64_t(64) << 20;
constexpr int64_t kAlignBytes = 64;

}  // namespace

template <typename T>
void CpuOps<T>::FreeDeleter::operator()(T* p) const {
  std::free(p);
}

template <typename T>
T* CpuOps<T>::Arena::take(int64_t n) {
  const int64_t align = kAlignBytes / int64_t(sizeof(T));
  const int64_t padded = (n + align - 1) / align * align;
  if (block == nullptr || used + padded > cap) return nullptr;
  T* p = block + used;
  used += padded;
  return p;
}

template <typename T>
T* CpuOps<T>::Arena::add_block(int64_t elems, bool zeroed, bool make_current) {
  const size_t bytes = size_t(elems) * sizeof(T);
  T* p = static_cast<T*>(zeroed ? std::calloc(bytes, 1) : std::malloc(bytes));
  if (!p) throw Error(cat("cpu backend: out of memory allocating ", bytes, " bytes"));
  blocks.emplace_back(p);
  total += elems;
  if (make_current) {
    block = p;
    used = 0;
    cap = elems;
  }
  return p;
}

template <typename T>
CpuOps<T>::CpuOps(int threads, bool batch_invariant)
    : threads_(threads > 0 ? threads : omp_get_max_threads()), batch_invariant_(batch_invariant) {
  openblas_set_num_threads(threads_);
}

template <typename T>
CpuOps<T>::~CpuOps() = default;

template <typename T>
DType CpuOps<T>::dtype() const {
  return sizeof(T) == 4 ? DType::DType_f32 : DType::DType_f64;
}

template <typename T>
View CpuOps<T>::alloc(int64_t rows, int64_t cols) {
  FLIDE_CHECK(rows >= 0 && cols >= 0, "alloc(", rows, ", ", cols, ")");
  const int64_t n = rows * cols, block_elems = kBlockBytes / int64_t(sizeof(T));
  if (n == 0) return {nullptr, rows, cols, dtype()};
  if (n > block_elems / 2) return {persistent_.add_block(n, true, false), rows, cols, dtype()};
  T* p = persistent_.take(n);
  if (!p) {
    persistent_.add_block(block_elems, true, true);
    p = persistent_.take(n);
  }
  return {p, rows, cols, dtype()};
}

template <typename T>
View CpuOps<T>::scratch(int64_t rows, int64_t cols) {
  FLIDE_CHECK(rows >= 0 && cols >= 0, "scratch(", rows, ", ", cols, ")");
  const int64_t n = rows * cols, align = kAlignBytes / int64_t(sizeof(T));
  if (n == 0) return {nullptr, rows, cols, dtype()};
  T* p = scratch_.take(n);
  if (!p) {  // grow geometrically: the next block at least doubles the capacity
    const int64_t elems = std::max({n + align, scratch_.total, kBlockBytes / int64_t(sizeof(T))});
    scratch_.add_block(elems, false, true);
    p = scratch_.take(n);
  }
  return {p, rows, cols, dtype()};
}

// When the arena grew after the mark, the newest block holds only what came after it: carving
// restarts there (the rest of the mark's block idles until reset merges). Going back to the
// mark's block instead would grow the arena again on every layer.
template <typename T>
void CpuOps<T>::scratch_rewind(const ScratchMark& mark) {
  scratch_.used = scratch_.block == mark.block ? mark.used : 0;
}

// The reference computes everything in T, so "at least float32" is simply T.
template <typename T>
View CpuOps<T>::scratch_f32(int64_t rows, int64_t cols) {
  return scratch(rows, cols);
}

template <typename T>
void CpuOps<T>::reset_scratch() {
  if (scratch_.blocks.size() > 1) {  // merge, so that the next round fits in one block
    const int64_t total = scratch_.total;
    scratch_ = Arena{};
    scratch_.add_block(total, false, true);
  }
  scratch_.used = 0;
}

template <typename T>
void CpuOps<T>::upload(View dst, const float* src) {
  T* d = ptr(dst);
  for (int64_t i = 0; i < dst.size(); ++i) d[i] = T(src[i]);
}

template <typename T>
void CpuOps<T>::download(View src, double* dst) {
  const T* s = ptr(src);
  for (int64_t i = 0; i < src.size(); ++i) dst[i] = double(s[i]);
}

template <typename T>
void CpuOps<T>::fill_zero(View dst) {
  std::fill(ptr(dst), ptr(dst) + dst.size(), T(0));
}

template <typename T>
void CpuOps<T>::set_stream(const Stream& s) {
  validate_stream(s);
  stream_ = s;
  ancestor_paths(s, path_begin_, path_nodes_);
}

template <typename T>
int64_t CpuOps<T>::rows_of(Rows which) const {
  return which == Rows::Rows_all ? int64_t(stream_.n_tokens()) : int64_t(stream_.out_rows.size());
}

template <typename T>
int32_t CpuOps<T>::stream_row(Rows which, int64_t r) const {
  return which == Rows::Rows_all ? int32_t(r) : stream_.out_rows[r];
}

template <typename T>
void CpuOps<T>::level_range(int level, int32_t* begin, int32_t* end) const {
  FLIDE_CHECK(level >= 0 && level < stream_.n_levels(), "level ", level);
  *begin = stream_.level_begin[level];
  *end = stream_.level_begin[level + 1];
}

template class CpuOps<float>;
template class CpuOps<double>;

std::unique_ptr<Ops> make_cpu_ops(DType dtype, int threads, bool batch_invariant) {
  switch (dtype) {
    case DType::DType_f32:
      return std::make_unique<CpuOps<float>>(threads, batch_invariant);
    case DType::DType_f64:
      return std::make_unique<CpuOps<double>>(threads, batch_invariant);
    default:
      break;
  }
  throw Error(cat("cpu backend: unsupported compute dtype ", dtype_name(dtype)));
}

}  // namespace flide
