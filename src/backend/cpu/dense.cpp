// Token-wise ops: embedding lookup, RMSNorm, GEMM (OpenBLAS), elementwise gates, row gathers.
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
  if (batch_invariant_) return gemm_fixed_rows(x, w, out, beta);
  blas_gemm(ptr(x), ptr(w), ptr(out), R, N, K, beta);
}

// Batch-invariant mode: OpenBLAS takes other paths for other row counts (gemv for one row,
// other kernels for a few), whose sums round differently, so a row's bits would depend on the
// other requests of its round. Every call here has exactly kInvariantRows rows, the last block
// copied into a zero-padded one: the same path for every row, each in a full micro-tile (every
// kernel's row tile divides kInvariantRows), its sums in the same order.
template <typename T>
void CpuOps<T>::gemm_fixed_rows(View x, View w, View out, T beta) {
  const int64_t R = x.rows, N = w.rows, K = x.cols, B = kInvariantRows;
  for (int64_t r0 = 0; r0 < R; r0 += B) {
    const int64_t n = std::min(B, R - r0);
    const T* xb = ptr(x) + r0 * K;
    T* ob = ptr(out) + r0 * N;
    if (n == B) {
      blas_gemm(xb, ptr(w), ob, B, N, K, beta);
      continue;
    }
    pad_x_.assign(size_t(B * K), T(0));
    pad_out_.assign(size_t(B * N), T(0));
    std::copy(xb, xb + n * K, pad_x_.begin());
    if (beta != T(0)) std::copy(ob, ob + n * N, pad_out_.begin());
    blas_gemm(pad_x_.data(), ptr(w), pad_out_.data(), B, N, K, beta);
    std::copy(pad_out_.begin(), pad_out_.begin() + n * N, ob);
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
