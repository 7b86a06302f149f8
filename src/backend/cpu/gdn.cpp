// Gated DeltaNet pieces: the causal depthwise conv + SiLU (written split into q, k, v, with q
// and k L2-normalised per head), the gates, the delta rule in both HF forms
// (torch_recurrent_gated_delta_rule and torch_chunk_gated_delta_rule, spec §4, §4.1) and the
// gated RMSNorm. Conv and delta rule run one tree level per call: each node starts from its
// slot_in window / state (its parent's, written by an earlier level) and, when it has children,
// leaves its own in slot_out. Nodes (for the conv, rows) run in parallel with each other
// (set_stream has checked that no node of the level writes a slot another one reads).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "backend/cpu/cpu_ops.h"

namespace flide {

namespace {

constexpr int kMaxConvKernel = 16;
constexpr int64_t kChunk = 64;  // HF chunk_size

// One value head j of one node: row-strided inputs already offset to the head's columns (q and
// k at key head j / (Hv / Hk)), the q scale Dk^-1/2, and the state S [Dk][Dv].
template <typename T>
struct GdnHead {
  const T* q;
  const T* k;
  const T* v;
  const T* g;
  const T* beta;
  T* out;
  int64_t q_stride, k_stride, v_stride, g_stride, out_stride;
  int64_t dk, dv;
  T scale;
};

// HF torch_recurrent_gated_delta_rule, token by token over rows [begin, end).
template <typename T>
void gdn_recurrent_head(const GdnHead<T>& h, int64_t begin, int64_t end, T* S) {
  const int64_t dk = h.dk, dv = h.dv;
  thread_local std::vector<T> buf;
  buf.resize(size_t(dk + dv));
  T* q = buf.data();
  T* kv_mem = q + dk;  // then delta
  for (int64_t t = begin; t < end; ++t) {
    const T* qt = h.q + t * h.q_stride;
    const T* kt = h.k + t * h.k_stride;
    const T* vt = h.v + t * h.v_stride;
    const T decay = std::exp(h.g[t * h.g_stride]);
    const T beta = h.beta[t * h.g_stride];
    for (int64_t i = 0; i < dk; ++i) q[i] = qt[i] * h.scale;
    // S = S * exp(g_t)
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
    // kv_mem = (S * k_t[:, None]).sum(-2)
    for (int64_t d = 0; d < dv; ++d) kv_mem[d] = 0;
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t d = 0; d < dv; ++d) kv_mem[d] += S[i * dv + d] * kt[i];
    // delta = (v_t - kv_mem) * beta_t
    T* delta = kv_mem;
    for (int64_t d = 0; d < dv; ++d) delta[d] = (vt[d] - kv_mem[d]) * beta;
    // S = S + k_t[:, None] * delta[None, :]
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t d = 0; d < dv; ++d) S[i * dv + d] += kt[i] * delta[d];
    // o_t = (S * q_t[:, None]).sum(-2)
    T* ot = h.out + t * h.out_stride;
    for (int64_t d = 0; d < dv; ++d) ot[d] = 0;
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t d = 0; d < dv; ++d) ot[d] += S[i * dv + d] * q[i];
  }
}

// HF torch_chunk_gated_delta_rule over rows [begin, end) in chunks of 64; the last chunk may be
// short (HF pads it with k = v = beta = g = 0 rows, which change neither the outputs of the real
// rows nor the final state, so it is simply processed at its own length). Per chunk, with
// gamma the in-chunk cumulative g:
//   attn = -(k_beta k^T * exp(gamma_i - gamma_j)) strictly lower; rows resolved by forward
//   substitution into T = (I + A)^-1; U = T v_beta; W = T (k_beta exp(gamma));
//   v_new = U - W S; o_i = (q_i exp(gamma_i)) S + sum_{j<=i} (q_i.k_j) exp(gamma_i - gamma_j)
//   v_new_j; S = S exp(gamma_last) + sum_j (k_j exp(gamma_last - gamma_j)) v_new_j^T.
template <typename T>
void gdn_chunked_head(const GdnHead<T>& h, int64_t begin, int64_t end, T* S) {
  const int64_t dk = h.dk, dv = h.dv, C = kChunk;
  thread_local std::vector<T> buf;
  buf.resize(size_t(C * dk * 3 + C * dv * 3 + C * C * 2 + C * 3 + dv));
  T* q = buf.data();       // [C][dk] scaled queries
  T* kb = q + C * dk;      // [C][dk] k * beta
  T* W = kb + C * dk;      // [C][dk] k_cumdecay
  T* vb = W + C * dk;      // [C][dv] v * beta
  T* U = vb + C * dv;      // [C][dv] new values
  T* vn = U + C * dv;      // [C][dv] v_new
  T* A = vn + C * dv;      // [C][C]  attn, then T = (I + A)^-1, then the intra-chunk q.k
  T* decay = A + C * C;    // [C][C]  exp(gamma_i - gamma_j), j <= i (HF decay_mask)
  T* gam = decay + C * C;  // [C]   cumulative g
  T* egam = gam + C;       // [C]     exp(gamma)
  T* row = egam + C;       // [C]     a row of attn before its update
  T* acc = row + C;        // [dv]
  for (int64_t c0 = begin; c0 < end; c0 += C) {
    const int64_t n = std::min(C, end - c0);
    auto k_row = [&](int64_t i) { return h.k + (c0 + i) * h.k_stride; };
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = c0 + i;
      const T beta = h.beta[t * h.g_stride];
      for (int64_t d = 0; d < dk; ++d) q[i * dk + d] = h.q[t * h.q_stride + d] * h.scale;
      for (int64_t d = 0; d < dk; ++d) kb[i * dk + d] = k_row(i)[d] * beta;
      for (int64_t d = 0; d < dv; ++d) vb[i * dv + d] = h.v[t * h.v_stride + d] * beta;
      gam[i] = (i > 0 ? gam[i - 1] : T(0)) + h.g[t * h.g_stride];
      egam[i] = std::exp(gam[i]);
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j) decay[i * C + j] = std::exp(gam[i] - gam[j]);
    // attn = -((k_beta @ k^T) * decay_mask).masked_fill(upper incl. diagonal, 0)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        T dot = 0;
        for (int64_t d = 0; d < dk; ++d) dot += kb[i * dk + d] * k_row(j)[d];
        A[i * C + j] = -(dot * decay[i * C + j]);
      }
    }
    // for i: attn[i, :i] = row + (row[:, None] * attn[:i, :i]).sum(-2); then attn += I
    for (int64_t i = 1; i < n; ++i) {
      for (int64_t j = 0; j < i; ++j) row[j] = A[i * C + j];
      for (int64_t j = 0; j < i; ++j) {
        T sum = 0;
        for (int64_t m = j + 1; m < i; ++m) sum += row[m] * A[m * C + j];  // attn[m][j] = 0, m <= j
        A[i * C + j] = row[j] + sum;
      }
    }
    for (int64_t i = 0; i < n; ++i) A[i * C + i] = 1;
    // value = attn @ v_beta; k_cumdecay = attn @ (k_beta * exp(gamma))
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t d = 0; d < dv; ++d) U[i * dv + d] = 0;
      for (int64_t d = 0; d < dk; ++d) W[i * dk + d] = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const T a = A[i * C + j];
        for (int64_t d = 0; d < dv; ++d) U[i * dv + d] += a * vb[j * dv + d];
        for (int64_t d = 0; d < dk; ++d) W[i * dk + d] += a * (kb[j * dk + d] * egam[j]);
      }
    }
    // attn = (q @ k^T * decay_mask).masked_fill(strictly upper, 0)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        T dot = 0;
        for (int64_t d = 0; d < dk; ++d) dot += q[i * dk + d] * k_row(j)[d];
        A[i * C + j] = dot * decay[i * C + j];
      }
    }
    // v_new = value - k_cumdecay @ S
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t d = 0; d < dv; ++d) acc[d] = 0;
      for (int64_t kk = 0; kk < dk; ++kk)
        for (int64_t d = 0; d < dv; ++d) acc[d] += W[i * dk + kk] * S[kk * dv + d];
      for (int64_t d = 0; d < dv; ++d) vn[i * dv + d] = U[i * dv + d] - acc[d];
    }
    // o = (q * exp(gamma)) @ S + attn @ v_new
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t d = 0; d < dv; ++d) acc[d] = 0;
      for (int64_t kk = 0; kk < dk; ++kk) {
        const T qd = q[i * dk + kk] * egam[i];
        for (int64_t d = 0; d < dv; ++d) acc[d] += qd * S[kk * dv + d];
      }
      T* ot = h.out + (c0 + i) * h.out_stride;
      for (int64_t d = 0; d < dv; ++d) ot[d] = 0;
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t d = 0; d < dv; ++d) ot[d] += A[i * C + j] * vn[j * dv + d];
      for (int64_t d = 0; d < dv; ++d) ot[d] = acc[d] + ot[d];
    }
    // S = S * exp(gamma_last) + (k * exp(gamma_last - gamma))^T @ v_new
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= egam[n - 1];
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < dk; ++kk) {
        const T kd = k_row(j)[kk] * decay[(n - 1) * C + j];
        for (int64_t d = 0; d < dv; ++d) S[kk * dv + d] += kd * vn[j * dv + d];
      }
    }
  }
}

}  // namespace

// c[t][ch] = silu(sum_j w[ch][j] * x_{t-K+1+j}[ch]), split into q | k | v; then HF's l2norm
// (fla, use_qk_l2norm_in_kernel) x * rsqrt(sum(x^2) + eps) on every Dk-wide head of q and k.
// Rows before a node's first row come from its slot_in window (oldest first), zeros without one.
// The level's rows run in parallel and only read windows; the windows its nodes leave (the last
// K-1 inputs of the node's whole path: its own rows, preceded by the tail of its incoming window
// when the node is shorter than K-1) are written afterwards, each channel keeping its incoming
// window in `prev` first, so a node may read and write the same slot.
template <typename T>
void CpuOps<T>::gdn_conv(View x, View w, View window, View q, View k, View v, int dim_k, double eps,
                         int level) {
  const int64_t C = x.cols, K = w.cols, Kd = q.cols, Vd = v.cols, Dk = dim_k;
  const int64_t T_rows = stream_.n_tokens();
  FLIDE_CHECK(Dk > 0 && Kd % Dk == 0 && k.cols == Kd && C == 2 * Kd + Vd, "x cols ", C, " q ",
              q.cols, " k ", k.cols, " v ", v.cols, " dim_k ", Dk, " (x must be [q | k | v])");
  FLIDE_CHECK(
      x.rows == T_rows && q.rows == T_rows && k.rows == T_rows && v.rows == T_rows && w.rows == C,
      "rows x ", x.rows, " q ", q.rows, " k ", k.rows, " v ", v.rows, " stream ", T_rows, "; w [",
      w.rows, ", ", w.cols, "]");
  FLIDE_CHECK(K >= 1 && K <= kMaxConvKernel, "kernel ", K);
  FLIDE_CHECK(window.cols == (K - 1) * C && window.rows >= stream_.n_slots, "window [", window.rows,
              ", ", window.cols, "]");
  FLIDE_CHECK(!overlaps(q, x) && !overlaps(k, x) && !overlaps(v, x),
              "q, k and v must not overlap x (the conv cannot run in place)");
  int32_t n_begin, n_end;
  level_range(level, &n_begin, &n_end);
  if (n_begin == n_end) return;
  // The level's nodes hold rows in [r_begin, r_end) (offsets increase with the node index).
  const int64_t r_begin = stream_.nodes[n_begin].offset;
  const int64_t r_end = stream_.nodes[n_end - 1].offset + stream_.nodes[n_end - 1].length;
  const int64_t W = window.cols;
#pragma omp parallel for num_threads(threads_)
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int32_t n = stream_.token_node[r];
    if (n < n_begin || n >= n_end) continue;
    const StreamNode& node = stream_.nodes[n];
    const int64_t s = r - node.offset;  // row in the node
    const T* win = node.slot_in >= 0 ? ptr(window) + node.slot_in * W : nullptr;
    T* qr = ptr(q) + r * Kd;
    T* kr = ptr(k) + r * Kd;
    T* vr = ptr(v) + r * Vd;
    for (int64_t c = 0; c < C; ++c) {
      const T* wc = ptr(w) + c * K;
      T sum = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t u = s - (K - 1) + j;  // input row relative to the node's first row
        const T in = u >= 0 ? ptr(x)[(node.offset + u) * C + c]
                     : win  ? win[(K - 1 + u) * C + c]
                            : T(0);
        sum += wc[j] * in;
      }
      (c < Kd ? qr[c] : c < 2 * Kd ? kr[c - Kd] : vr[c - 2 * Kd]) = silu(sum);
    }
    for (T* row : {qr, kr}) {
      for (int64_t h = 0; h < Kd; h += Dk) {
        T* head = row + h;
        T sum_sq = 0;
        for (int64_t d = 0; d < Dk; ++d) sum_sq += head[d] * head[d];
        const T inv = T(1) / std::sqrt(sum_sq + T(eps));
        for (int64_t d = 0; d < Dk; ++d) head[d] *= inv;
      }
    }
  }
  if (K == 1) return;  // no window
#pragma omp parallel for collapse(2) num_threads(threads_)
  for (int32_t n = n_begin; n < n_end; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      const StreamNode& node = stream_.nodes[n];
      if (node.slot_out < 0) continue;
      T prev[kMaxConvKernel];
      for (int64_t j = 0; j < K - 1; ++j)
        prev[j] = node.slot_in >= 0 ? ptr(window)[node.slot_in * W + j * C + c] : T(0);
      T* dst = ptr(window) + node.slot_out * W;
      for (int64_t j = 0; j < K - 1; ++j) {
        const int64_t u = node.length - (K - 1) + j;
        dst[j * C + c] = u >= 0 ? ptr(x)[(node.offset + u) * C + c] : prev[K - 1 + u];
      }
    }
  }
}

// HF: g = -A_log.float().exp() * F.softplus(a.float() + dt_bias); beta = b.sigmoid().
template <typename T>
void CpuOps<T>::gdn_gates(View ab, View A_log, View dt_bias, View g, View beta) {
  const int64_t Hv = g.cols;
  FLIDE_CHECK(ab.cols == 2 * Hv && g.rows == ab.rows && beta.rows == ab.rows && beta.cols == Hv &&
                  A_log.size() == Hv && dt_bias.size() == Hv,
              "ab [", ab.rows, ", ", ab.cols, "] g [", g.rows, ", ", g.cols, "] beta [", beta.rows,
              ", ", beta.cols, "]");
#pragma omp parallel for num_threads(threads_)
  for (int64_t t = 0; t < ab.rows; ++t) {
    const T* a = ptr(ab) + t * 2 * Hv;
    const T* b = a + Hv;
    for (int64_t j = 0; j < Hv; ++j) {
      ptr(g)[t * Hv + j] = -std::exp(ptr(A_log)[j]) * softplus(a[j] + ptr(dt_bias)[j]);
      ptr(beta)[t * Hv + j] = sigmoid(b[j]);
    }
  }
}

template <typename T>
void CpuOps<T>::gdn(View q, View k, View v, View g, View beta, View state, View out, int level,
                    int heads_k, int heads_v, int dim_k, int dim_v, GdnForm form) {
  const int64_t Dk = dim_k, Dv = dim_v, T_rows = stream_.n_tokens();
  FLIDE_CHECK(heads_k > 0 && heads_v % heads_k == 0, "heads ", heads_k, " / ", heads_v);
  FLIDE_CHECK(q.rows == T_rows && k.rows == T_rows && v.rows == T_rows && g.rows == T_rows &&
                  beta.rows == T_rows && out.rows == T_rows,
              "rows q ", q.rows, " k ", k.rows, " v ", v.rows, " g ", g.rows, " beta ", beta.rows,
              " out ", out.rows, " stream ", T_rows);
  FLIDE_CHECK(q.cols == heads_k * Dk && k.cols == q.cols && v.cols == heads_v * Dv &&
                  out.cols == v.cols && g.cols == heads_v && beta.cols == heads_v,
              "cols q ", q.cols, " k ", k.cols, " v ", v.cols, " g ", g.cols, " out ", out.cols);
  FLIDE_CHECK(state.cols == heads_v * Dk * Dv && state.rows >= stream_.n_slots, "state [",
              state.rows, ", ", state.cols, "]");
  if (level == 0)  // padding rows (stream.h), which no level's nodes cover
    std::fill(ptr(out) + (T_rows - stream_.pad_tokens) * out.cols, ptr(out) + T_rows * out.cols,
              T(0));
  int32_t n_begin, n_end;
  level_range(level, &n_begin, &n_end);
  const int group = heads_v / heads_k;
  const T scale = T(1.0 / std::sqrt(double(Dk)));
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads_)
  for (int32_t n = n_begin; n < n_end; ++n) {
    for (int j = 0; j < heads_v; ++j) {
      const StreamNode& node = stream_.nodes[n];
      const int64_t kh = j / group;
      const GdnHead<T> head{ptr(q) + kh * Dk,
                            ptr(k) + kh * Dk,
                            ptr(v) + j * Dv,
                            ptr(g) + j,
                            ptr(beta) + j,
                            ptr(out) + j * Dv,
                            q.cols,
                            k.cols,
                            v.cols,
                            g.cols,
                            out.cols,
                            Dk,
                            Dv,
                            scale};
      thread_local std::vector<T> S;
      S.resize(size_t(Dk * Dv));
      const int64_t head_off = int64_t(j) * Dk * Dv;
      for (int64_t i = 0; i < Dk * Dv; ++i)
        S[i] = node.slot_in >= 0 ? ptr(state)[node.slot_in * state.cols + head_off + i] : T(0);
      if (form == GdnForm::GdnForm_recurrent)
        gdn_recurrent_head(head, node.offset, node.offset + node.length, S.data());
      else
        gdn_chunked_head(head, node.offset, node.offset + node.length, S.data());
      if (node.slot_out >= 0) {
        T* dst = ptr(state) + node.slot_out * state.cols + head_off;
        for (int64_t i = 0; i < Dk * Dv; ++i) dst[i] = S[i];
      }
    }
  }
}

// HF Qwen3_5RMSNormGated: w * (o * rsqrt(mean(o^2) + eps)) * silu(z); plain w, norm before gate.
template <typename T>
void CpuOps<T>::gated_rmsnorm(View o, View z, View w, View out, double eps) {
  const int64_t D = o.cols;
  FLIDE_CHECK(
      z.rows == o.rows && z.cols == D && out.rows == o.rows && out.cols == D && w.size() == D,
      "o [", o.rows, ", ", D, "] z [", z.rows, ", ", z.cols, "] w ", w.size());
#pragma omp parallel for num_threads(threads_)
  for (int64_t r = 0; r < o.rows; ++r) {
    const T* orow = ptr(o) + r * D;
    const T* zrow = ptr(z) + r * D;
    T* yrow = ptr(out) + r * D;
    T sum_sq = 0;
    for (int64_t d = 0; d < D; ++d) sum_sq += orow[d] * orow[d];
    const T inv = T(1) / std::sqrt(sum_sq / T(D) + T(eps));
    for (int64_t d = 0; d < D; ++d) yrow[d] = ptr(w)[d] * (orow[d] * inv) * silu(zrow[d]);
  }
}

#define FLIDE_INSTANTIATE(T)                                                                      \
  template void CpuOps<T>::gdn_conv(View, View, View, View, View, View, int, double, int);        \
  template void CpuOps<T>::gdn_gates(View, View, View, View, View);                               \
  template void CpuOps<T>::gdn(View, View, View, View, View, View, View, int, int, int, int, int, \
                               GdnForm);                                                          \
  template void CpuOps<T>::gated_rmsnorm(View, View, View, View, double);
FLIDE_INSTANTIATE(float)
FLIDE_INSTANTIATE(double)
#undef FLIDE_INSTANTIATE

}  // namespace flide
