// Token-wise ops: embedding lookup, RMSNorm, GEMM (OpenBLAS), elementwise gates, row gathers.
// Reductions (sum of squares) accumulate in T, as HF does in fp32 for an fp32 model.
#include <cblas.h>

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
  if constexpr (sizeof(T) == 4) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, N, K, 1.0f, ptr(x), K, ptr(w), K, beta,
                ptr(out), N);
  } else {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, N, K, 1.0, ptr(x), K, ptr(w), K, beta,
                ptr(out), N);
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
