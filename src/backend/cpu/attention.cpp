// Gated attention: the query side (per-head query/gate split, q_norm, partial NeoX RoPE), the key
// side (k_norm, RoPE) and tree attention.
// Tree attention is the definition of the visibility rule (DESIGN.md "Requests are trees"): a
// query at stream row i of node n sees every row of n's ancestors and n's rows up to i, in path
// order, which is exactly plain causal attention over the concatenated root-to-n path.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace flide {

template <typename T>
void CpuOps<T>::split_query_gate(View qg, View q, View gate, int heads, int head_dim) {
  const int64_t hd = head_dim;
  FLIDE_CHECK(qg.cols == heads * 2 * hd && q.cols == heads * hd && gate.cols == heads * hd &&
              q.rows == qg.rows && gate.rows == qg.rows);
#pragma omp parallel for num_threads(threads_)
  for (int64_t r = 0; r < qg.rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      const T* src = ptr(qg) + r * qg.cols + h * 2 * hd;
      T* qh = ptr(q) + r * q.cols + h * hd;
      T* gh = ptr(gate) + r * gate.cols + h * hd;
      for (int64_t d = 0; d < hd; ++d) qh[d] = src[d];
      for (int64_t d = 0; d < hd; ++d) gh[d] = src[hd + d];
    }
  }
}

// HF Qwen3_5TextRotaryEmbedding + apply_rotary_pos_emb with partial rotary: inv_freq, the angle
// pos * inv_freq and cos/sin are all computed in T (HF: fp32), pairs (i, i + rot_dim / 2).
template <typename T>
void CpuOps<T>::rope(View x, Rows which, int heads, int head_dim, int rot_dim, double theta) {
  FLIDE_CHECK(x.rows == rows_of(which) && x.cols == int64_t(heads) * head_dim, "x [", x.rows, ", ",
              x.cols, "]");
  FLIDE_CHECK(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_dim, "rot_dim ", rot_dim);
  const int half = rot_dim / 2;
#pragma omp parallel for num_threads(threads_)
  for (int64_t r = 0; r < x.rows; ++r) {
    thread_local std::vector<T> cos_sin;
    cos_sin.resize(size_t(rot_dim));
    T* cos_t = cos_sin.data();
    T* sin_t = cos_t + half;
    const T pos = T(stream_.positions[stream_row(which, r)]);
    for (int i = 0; i < half; ++i) {
      const T inv_freq = T(1) / std::pow(T(theta), T(2 * i) / T(rot_dim));
      const T angle = pos * inv_freq;
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    for (int h = 0; h < heads; ++h) {
      T* xh = ptr(x) + r * x.cols + int64_t(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const T x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * cos_t[i] - x2 * sin_t[i];         // q * cos + rotate_half(q) * sin, first half
        xh[i + half] = x2 * cos_t[i] + x1 * sin_t[i];  // second half
      }
    }
  }
}

template <typename T>
void CpuOps<T>::attention_query(View qg, View norm, View q, View gate, Rows which, int heads,
                                int head_dim, int rot_dim, double theta, double eps) {
  FLIDE_CHECK(qg.rows == rows_of(which), "qg [", qg.rows, ", ", qg.cols, "] rows ", rows_of(which));
  split_query_gate(qg, q, gate, heads, head_dim);
  rmsnorm(q.reshaped(head_dim), norm, q.reshaped(head_dim), eps, true);
  rope(q, which, heads, head_dim, rot_dim, theta);
}

template <typename T>
void CpuOps<T>::attention_key(View k, View norm, int heads, int head_dim, int rot_dim, double theta,
                              double eps) {
  FLIDE_CHECK(k.rows == stream_.n_tokens() && k.cols == int64_t(heads) * head_dim, "k [", k.rows,
              ", ", k.cols, "]");
  rmsnorm(k.reshaped(head_dim), norm, k.reshaped(head_dim), eps, true);
  rope(k, Rows::Rows_all, heads, head_dim, rot_dim, theta);
}

// HF eager attention per query row and head: scores q.k * scale, softmax (max subtracted),
// weights . v; GQA by repeat_kv (query head h reads kv head h / (heads_q / heads_kv)).
template <typename T>
void CpuOps<T>::attention(View q, View k, View v, View out, Rows which, int heads_q, int heads_kv,
                          int head_dim, double scale) {
  const int64_t hd = head_dim;
  const int64_t R = rows_of(which);
  FLIDE_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, "heads ", heads_q, " / ", heads_kv);
  FLIDE_CHECK(q.rows == R && out.rows == R && q.cols == heads_q * hd && out.cols == q.cols, "q [",
              q.rows, ", ", q.cols, "] out [", out.rows, ", ", out.cols, "]");
  FLIDE_CHECK(k.rows == stream_.n_tokens() && v.rows == k.rows && k.cols == heads_kv * hd &&
                  v.cols == k.cols,
              "k [", k.rows, ", ", k.cols, "] v [", v.rows, ", ", v.cols, "]");
  const int group = heads_q / heads_kv;
  const int64_t n_tokens = stream_.n_tokens();
  const int64_t pad_rows = which == Rows::Rows_out ? stream_.pad_out : 0;
#pragma omp parallel for collapse(2) schedule(dynamic, 8) num_threads(threads_)
  for (int64_t r = 0; r < R; ++r) {
    for (int h = 0; h < heads_q; ++h) {
      thread_local std::vector<T> scores;
      if (int64_t(scores.size()) < n_tokens) scores.resize(size_t(n_tokens));
      const int32_t row = stream_row(which, r);
      const int32_t node = stream_.token_node[row];
      T* oh = ptr(out) + r * out.cols + h * hd;
      if (node < 0 || r >= R - pad_rows) {  // padding (stream.h): nothing reads it
        for (int64_t d = 0; d < hd; ++d) oh[d] = 0;
        continue;
      }
      const T* qh = ptr(q) + r * q.cols + h * hd;
      const int64_t kv_off = int64_t(h / group) * hd;
      // The visible keys, root first: whole ancestor nodes, then the own node up to `row`.
      auto for_each_key = [&](auto&& fn) {
        int64_t j = 0;
        for (int32_t p = path_begin_[node]; p < path_begin_[node + 1]; ++p) {
          const StreamNode& a = stream_.nodes[path_nodes_[p]];
          const int32_t end = path_nodes_[p] == node ? row + 1 : a.offset + a.length;
          for (int32_t t = a.offset; t < end; ++t) fn(j++, t);
        }
      };
      T max_score = -INFINITY;
      for_each_key([&](int64_t j, int32_t t) {
        const T* kt = ptr(k) + int64_t(t) * k.cols + kv_off;
        T dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += qh[d] * kt[d];
        scores[j] = dot * T(scale);
        max_score = std::max(max_score, scores[j]);
      });
      T sum = 0;
      for_each_key([&](int64_t j, int32_t) {
        scores[j] = std::exp(scores[j] - max_score);
        sum += scores[j];
      });
      for (int64_t d = 0; d < hd; ++d) oh[d] = 0;
      for_each_key([&](int64_t j, int32_t t) {
        const T weight = scores[j] / sum;
        const T* vt = ptr(v) + int64_t(t) * v.cols + kv_off;
        for (int64_t d = 0; d < hd; ++d) oh[d] += weight * vt[d];
      });
    }
  }
}

#define FLIDE_INSTANTIATE(T)                                                                    \
  template void CpuOps<T>::attention_query(View, View, View, View, Rows, int, int, int, double, \
                                           double);                                             \
  template void CpuOps<T>::attention_key(View, View, int, int, int, double, double);            \
  template void CpuOps<T>::attention(View, View, View, View, Rows, int, int, int, double);
FLIDE_INSTANTIATE(float)
FLIDE_INSTANTIATE(double)
#undef FLIDE_INSTANTIATE

}  // namespace flide
