// Token-wise ops: embedding lookup, RMSNorm, GEMM (OpenBLAS; in batch-invariant mode a fixed-order
// one of our own), elementwise gates, row gathers.
// Reductions (sum of squares) accumulate in T, as HF does in fp32 for an fp32 model.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"

namespace flide {

template <typename T>
void CpuOps<T>::embed(View table, View out) {
  const int64_t n_tokens = stream_.n_tokens();
  FLIDE_CHECK(out.rows == n_tokens && out.cols == table.cols, "out [", out.rows, ", ", out.cols,
              "] table [", table.rows, ", ", table.cols, "]");
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int32_t id = stream_.token_ids[t];
    FLIDE_CHECK(id >= 0 && id < table.rows, "token id ", id, " outside the table of ", table.rows);
  }
  const int64_t H = table.cols;
#pragma omp parallel for num_threads(threads_)
  for (int64_t t = 0; t < n_tokens; ++t) {
    const T* src = ptr(table) + int64_t(stream_.token_ids[t]) * H;
    T* dst = ptr(out) + t * H;
    for (int64_t c = 0; c < H; ++c) dst[c] = src[c];
  }
}

namespace {

// out [M, N] = x [M, K] . w [N, K]^T + beta out, all row-major, through OpenBLAS.
void blas_gemm(const float* x, const float* w, float* out, int64_t M, int64_t N, int64_t K,
               float beta) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, beta, out, N);
}
void blas_gemm(const double* x, const double* w, double* out, int64_t M, int64_t N, int64_t K,
               double beta) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0, x, K, w, K, beta, out, N);
}

// a . b over K, as kLanes interleaved partial sums (lane j: k = j mod kLanes, in order), added
// pairwise, then the tail: the same order for every call with this K.
template <typename T>
T fixed_order_dot(const T* a, const T* b, int64_t K) {
  constexpr int64_t kLanes = 8;  // the pairwise sum at the end adds exactly these 8
  T acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += a[k + j] * b[k + j];
  T tail = 0;
  for (; k < K; ++k) tail += a[k] * b[k];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])) + tail;
}

// HF Qwen3_5RMSNorm's scaling of one row x [C] into y, given the row's sum of squares.
template <typename T>
void scale_row(const T* x, const T* w, T* y, T sum_sq, int64_t C, double eps, bool unit_offset) {
  const T inv = T(1) / std::sqrt(sum_sq / T(C) + T(eps));
  for (int64_t c = 0; c < C; ++c) y[c] = x[c] * inv * (unit_offset ? T(1) + w[c] : w[c]);
}

}  // namespace

// HF Qwen3_5RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + w); the gated variant lives in gdn.cpp.
template <typename T>
void CpuOps<T>::rmsnorm(View x, View w, View out, double eps, bool unit_offset) {
  FLIDE_CHECK(w.size() == x.cols && out.rows == x.rows && out.cols == x.cols);
  const int64_t C = x.cols;
#pragma omp parallel for num_threads(threads_)
  for (int64_t r = 0; r < x.rows; ++r) {
    const T* xr = ptr(x) + r * C;
    T sum_sq = 0;
    for (int64_t c = 0; c < C; ++c) sum_sq += xr[c] * xr[c];
    scale_row(xr, ptr(w), ptr(out) + r * C, sum_sq, C, eps, unit_offset);
  }
}

template <typename T>
void CpuOps<T>::gemm(View x, View w, View out, T beta) {
  FLIDE_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "x [", x.rows, ", ",
              x.cols, "] w [", w.rows, ", ", w.cols, "] out [", out.rows, ", ", out.cols, "]");
  const int64_t R = x.rows, N = w.rows, K = x.cols;
  if (R == 0 || N == 0 || (K == 0 && beta != T(0))) return;
  if (K == 0) return fill_zero(out);
  if (batch_invariant_) return gemm_invariant(x, w, out, beta);
  blas_gemm(ptr(x), ptr(w), ptr(out), R, N, K, beta);
}

// Batch-invariant mode: every output is one dot product of its row of x and its row of w, summed
// in one fixed order whatever the row's place in the call. OpenBLAS's kernels round a row by its
// place in their tiles, not only by the call's row count: on its Haswell kernels (what OpenBLAS
// 0.3.21 runs on AMD EPYC) a float row at place 6-11 of every 12 comes out with other bits than
// at place 0-5, in blocks of any fixed size. So a row's bits would depend on the other requests
// of its round. Blocks of 4 rows x 64 columns keep x's rows in cache while w's stream.
template <typename T>
void CpuOps<T>::gemm_invariant(View x, View w, View out, T beta) {
  constexpr int64_t kRowBlock = 4, kColBlock = 64;
  const int64_t R = x.rows, N = w.rows, K = x.cols;
  const int64_t row_blocks = (R + kRowBlock - 1) / kRowBlock;
  const int64_t col_blocks = (N + kColBlock - 1) / kColBlock;
  const T* xp = ptr(x);
  const T* wp = ptr(w);
  T* op = ptr(out);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int64_t b = 0; b < row_blocks * col_blocks; ++b) {
    const int64_t r0 = b / col_blocks * kRowBlock, n0 = b % col_blocks * kColBlock;
    for (int64_t n = n0; n < std::min(N, n0 + kColBlock); ++n)
      for (int64_t r = r0; r < std::min(R, r0 + kRowBlock); ++r) {
        const T d = fixed_order_dot(xp + r * K, wp + n * K, K);
        op[r * N + n] = beta == T(0) ? d : beta * op[r * N + n] + d;
      }
  }
}

template <typename T>
void CpuOps<T>::matmul(View x, View w, View out) {
  gemm(x, w, out, T(0));
}

template <typename T>
void CpuOps<T>::matmul_add(View x, View w, View acc) {
  gemm(x, w, acc, T(1));
}

template <typename T>
void CpuOps<T>::silu_mul(View gate, View up, View out) {
  FLIDE_CHECK(gate.size() == up.size() && out.size() == gate.size());
  const T* g = ptr(gate);
  const T* u = ptr(up);
  T* o = ptr(out);
#pragma omp parallel for num_threads(threads_)
  for (int64_t i = 0; i < out.size(); ++i) o[i] = silu(g[i]) * u[i];
}

template <typename T>
void CpuOps<T>::sigmoid_mul(View x, View gate) {
  FLIDE_CHECK(x.size() == gate.size());
  T* xp = ptr(x);
  const T* g = ptr(gate);
#pragma omp parallel for num_threads(threads_)
  for (int64_t i = 0; i < x.size(); ++i) xp[i] *= sigmoid(g[i]);
}

template <typename T>
void CpuOps<T>::gather_rows(View x, View out) {
  const int64_t R = int64_t(stream_.out_rows.size());
  FLIDE_CHECK(out.rows == R && out.cols == x.cols && x.rows == stream_.n_tokens(), "x [", x.rows,
              ", ", x.cols, "] out [", out.rows, ", ", out.cols, "] out_rows ", R);
  const int64_t C = x.cols;
#pragma omp parallel for num_threads(threads_)
  for (int64_t r = 0; r < R; ++r) {
    const T* src = ptr(x) + int64_t(stream_.out_rows[r]) * C;
    T* dst = ptr(out) + r * C;
    for (int64_t c = 0; c < C; ++c) dst[c] = src[c];
  }
}

#define FLIDE_INSTANTIATE(T)                                        \
  template void CpuOps<T>::embed(View, View);                       \
  template void CpuOps<T>::rmsnorm(View, View, View, double, bool); \
  template void CpuOps<T>::matmul(View, View, View);                \
  template void CpuOps<T>::matmul_add(View, View, View);            \
  template void CpuOps<T>::silu_mul(View, View, View);              \
  template void CpuOps<T>::sigmoid_mul(View, View);                 \
  template void CpuOps<T>::gather_rows(View, View);
FLIDE_INSTANTIATE(float)
FLIDE_INSTANTIATE(double)
#undef FLIDE_INSTANTIATE

}  // namespace flide
