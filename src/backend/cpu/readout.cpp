// Selective readout: only the logits the round asked for, as dot products of an out row's
// final hidden state with the LM-head rows of the chosen token ids (full-vocabulary rows use
// gather_rows + matmul instead).
#include "backend/cpu/cpu_ops.h"

namespace flide {

template <typename T>
void CpuOps<T>::select_logits(View h, View w, View out) {
  const int64_t M = int64_t(stream_.select_out.size()), H = h.cols;
  FLIDE_CHECK(
      w.cols == H && out.rows == M && out.cols == 1 && h.rows == int64_t(stream_.out_rows.size()),
      "h [", h.rows, ", ", H, "] w [", w.rows, ", ", w.cols, "] out [", out.rows, ", ", out.cols,
      "] selects ", M);
  for (int64_t m = 0; m < M; ++m)
    FLIDE_CHECK(stream_.select_ids[m] >= 0 && stream_.select_ids[m] < w.rows, "select id ",
                stream_.select_ids[m], " outside the LM head of ", w.rows);
#pragma omp parallel for num_threads(threads_)
  for (int64_t m = 0; m < M; ++m) {
    const T* hr = ptr(h) + int64_t(stream_.select_out[m]) * H;
    const T* wr = ptr(w) + int64_t(stream_.select_ids[m]) * H;
    T dot = 0;
    for (int64_t c = 0; c < H; ++c) dot += hr[c] * wr[c];
    ptr(out)[m] = dot;
  }
}

template void CpuOps<float>::select_logits(View, View, View);
template void CpuOps<double>::select_logits(View, View, View);

}  // namespace flide
