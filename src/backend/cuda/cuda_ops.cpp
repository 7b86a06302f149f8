// CudaOps: every op but matmul, each a host-side check of dtypes and shapes (the same shape
// rules as the CPU reference) followed by one launcher of src/kernels/. Per-round metadata
// (token ids, positions, tree structure, out rows, selects, attention plans) comes from the
// device copy set_stream made; level ranges are read on the device from level_begin.
#include "backend/cuda/cuda_ops.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/dense.h"
#include "kernels/gdn.h"

namespace flide {

namespace {

using bf16 = __nv_bfloat16;

bf16* as_bf16(const View& v, const char* op, const char* name) {
  FLIDE_CHECK(v.dtype == DType::DType_bf16, "cuda ", op, ": ", name, " is ", dtype_name(v.dtype),
              ", must be bf16");
  return static_cast<bf16*>(v.data);
}

float* as_f32(const View& v, const char* op, const char* name) {
  FLIDE_CHECK(v.dtype == DType::DType_f32, "cuda ", op, ": ", name, " is ", dtype_name(v.dtype),
              ", must be f32 (scratch_f32)");
  return static_cast<float*>(v.data);
}

// What attention_prep supports (kernels/dense.h), checked on the host for a clear message.
void check_rope_dims(const char* op, int head_dim, int rot_dim) {
  FLIDE_CHECK(head_dim > 0 && head_dim <= kernels::kAttentionPrepMaxHeadDim && rot_dim > 0 &&
                  rot_dim % 2 == 0 && rot_dim <= head_dim,
              "cuda ", op, ": head_dim ", head_dim, " (at most ", kernels::kAttentionPrepMaxHeadDim,
              "), rot_dim ", rot_dim, " (even, at most head_dim)");
}

// What the tree-attention kernels take (kernels/attention.h): grouped heads, a head dim they are
// built for, and k, v [n_tokens, heads_kv * head_dim].
void check_attention_kv(const char* op, View k, View v, int64_t n_tokens, int heads_q, int heads_kv,
                        int head_dim) {
  const int64_t hd = head_dim;
  FLIDE_CHECK(heads_kv > 0 && heads_q % heads_kv == 0, "cuda ", op, ": heads ", heads_q, " / ",
              heads_kv);
  FLIDE_CHECK(hd == 16 || hd == 24 || hd == 32 || hd == 64 || hd == 128 || hd == 256, "cuda ", op,
              ": head_dim ", hd, " (supported: 16, 24, 32, 64, 128, 256)");
  FLIDE_CHECK(k.rows == n_tokens && v.rows == k.rows && k.cols == heads_kv * hd && v.cols == k.cols,
              "cuda ", op, ": k [", k.rows, ", ", k.cols, "] v [", v.rows, ", ", v.cols,
              "] tokens ", n_tokens);
}

}  // namespace

void CudaOps::need_stream(const char* op) const {
  FLIDE_CHECK(have_stream_, "cuda ", op, ": no stream (call set_stream first)");
}

int64_t CudaOps::rows_of(Rows which) const {
  return which == Rows::Rows_all ? int64_t(meta_.n_tokens) : int64_t(n_out_);
}

const int32_t* CudaOps::rows_ptr(Rows which) const {
  return which == Rows::Rows_all ? nullptr : meta_.out_rows;
}

void CudaOps::check_level(int level, const char* op) const {
  FLIDE_CHECK(level >= 0 && level < n_levels_, "cuda ", op, ": level ", level, " of ", n_levels_);
}

// ---- dense ----

void CudaOps::embed(View table, View out) {
  need_stream("embed");
  const int64_t T = meta_.n_tokens;
  FLIDE_CHECK(out.rows == T && out.cols == table.cols, "cuda embed: out [", out.rows, ", ",
              out.cols, "] table [", table.rows, ", ", table.cols, "] tokens ", T);
  FLIDE_CHECK(max_token_id_ < table.rows, "token id ", max_token_id_, " outside the table of ",
              table.rows);
  const bf16* tp = as_bf16(table, "embed", "table");
  bf16* op = as_bf16(out, "embed", "out");
  if (out.size() == 0) return;
  if (!op_begin({table, out})) return;
  launched(kernels::embed(token_ids_, tp, op, T, table.cols, stream_), "embed");
}

void CudaOps::rmsnorm(View x, View w, View out, double eps, bool unit_offset) {
  FLIDE_CHECK(w.size() == x.cols && out.rows == x.rows && out.cols == x.cols, "cuda rmsnorm: x [",
              x.rows, ", ", x.cols, "] w ", w.size(), " out [", out.rows, ", ", out.cols, "]");
  const bf16* xp = as_bf16(x, "rmsnorm", "x");
  const bf16* wp = as_bf16(w, "rmsnorm", "w");
  bf16* op = as_bf16(out, "rmsnorm", "out");
  if (x.size() == 0) return;
  if (!op_begin({x, w, out})) return;
  launched(kernels::rmsnorm(xp, wp, op, x.rows, x.cols, float(eps), unit_offset, stream_),
           "rmsnorm");
}

void CudaOps::silu_mul(View gate, View up, View out) {
  FLIDE_CHECK(gate.size() == up.size() && out.size() == gate.size(), "cuda silu_mul: gate ",
              gate.size(), " up ", up.size(), " out ", out.size());
  const bf16* gp = as_bf16(gate, "silu_mul", "gate");
  const bf16* up_p = as_bf16(up, "silu_mul", "up");
  bf16* op = as_bf16(out, "silu_mul", "out");
  if (out.size() == 0) return;
  if (!op_begin({gate, up, out})) return;
  launched(kernels::silu_mul(gp, up_p, op, out.size(), stream_), "silu_mul");
}

// One GEMM (kernels::swiglu_gemm) where the kernel takes the shape, else Ops' three steps. The
// fused kernel is batch-invariant by construction (a row's sums do not depend on M), so it needs
// no pinned plan. With FP8 copies of both weights (fp8.cpp), x is quantized and the GEMM runs on
// FP8 operands; so do the other fused products below.
void CudaOps::swiglu(View x, View w_gate, View w_up, View out) {
  swiglu_writing(x, w_gate, w_up, out, nullptr);
}

void CudaOps::swiglu_into_product(View x, View w_gate, View w_up, View out, View w_next) {
  swiglu_writing(x, w_gate, w_up, out, &w_next);
}

void CudaOps::swiglu_writing(View x, View w_gate, View w_up, View out, const View* w_next) {
  FLIDE_CHECK(x.cols == w_gate.cols && w_up.rows == w_gate.rows && w_up.cols == w_gate.cols &&
                  out.rows == x.rows && out.cols == w_gate.rows,
              "cuda swiglu: x [", x.rows, ", ", x.cols, "] w_gate [", w_gate.rows, ", ",
              w_gate.cols, "] w_up [", w_up.rows, ", ", w_up.cols, "] out [", out.rows, ", ",
              out.cols, "]");
  FLIDE_CHECK(!overlaps(x, out), "cuda swiglu: out shares memory with x");
  const bf16* xp = as_bf16(x, "swiglu", "x");
  const bf16* gp = as_bf16(w_gate, "swiglu", "w_gate");
  const bf16* up_p = as_bf16(w_up, "swiglu", "w_up");
  bf16* op = as_bf16(out, "swiglu", "out");
  const int64_t M = x.rows, N = w_gate.rows, K = x.cols;
  if (K == 0 || !kernels::swiglu_gemm_supported(xp, gp, up_p, op, N, K))
    return Ops::swiglu(x, w_gate, w_up, out);
  if (M == 0 || N == 0) return;
  const kernels::Fp8Rows gate8 = fp8_weight(w_gate), up8 = fp8_weight(w_up);
  if (gate8.data && up8.data) {
    const kernels::Fp8Rows x8 = quantized(x);
    const kernels::Fp8Blocks out8 = w_next ? product_input_fp8(out, *w_next) : kernels::Fp8Blocks{};
    if (!op_begin_shaped({x, w_gate, w_up, out}, {1, out8.data != nullptr}, M, 2 * N, K)) return;
    launched(kernels::swiglu_gemm_fp8(x8, gate8, up8, op, out8, M, N, K, stream_), "swiglu");
    return;
  }
  if (!op_begin_shaped({x, w_gate, w_up, out}, {}, M, 2 * N, K)) return;
  launched(kernels::swiglu_gemm(xp, gp, up_p, op, M, N, K, stream_), "swiglu");
}

void CudaOps::sigmoid_mul(View x, View gate) {
  FLIDE_CHECK(x.size() == gate.size(), "cuda sigmoid_mul: x ", x.size(), " gate ", gate.size());
  bf16* xp = as_bf16(x, "sigmoid_mul", "x");
  const bf16* gp = as_bf16(gate, "sigmoid_mul", "gate");
  if (x.size() == 0) return;
  if (!op_begin({x, gate})) return;
  launched(kernels::sigmoid_mul(xp, gp, x.size(), stream_), "sigmoid_mul");
}

// bf16 or f32 rows (the same dtype on both sides): the kernel copies elements of either size.
void CudaOps::gather_rows(View x, View out) {
  need_stream("gather_rows");
  FLIDE_CHECK(out.rows == n_out_ && out.cols == x.cols && x.rows == meta_.n_tokens,
              "cuda gather_rows: x [", x.rows, ", ", x.cols, "] out [", out.rows, ", ", out.cols,
              "] out_rows ", n_out_, " tokens ", meta_.n_tokens);
  FLIDE_CHECK(x.dtype == out.dtype && (x.dtype == DType::DType_bf16 || x.dtype == DType::DType_f32),
              "cuda gather_rows: x is ", dtype_name(x.dtype), ", out is ", dtype_name(out.dtype));
  if (out.size() == 0) return;
  if (!op_begin({x, out})) return;
  launched(kernels::gather_rows(x.data, meta_.out_rows, out.data, out.rows, out.cols,
                                int(dtype_size(x.dtype)), stream_),
           "gather_rows");
}

// ---- gated attention ----

void CudaOps::attention_query(View qg, View norm, View q, View gate, Rows which, int heads,
                              int head_dim, int rot_dim, double theta, double eps) {
  need_stream("attention_query");
  check_rope_dims("attention_query", head_dim, rot_dim);
  const int64_t hd = head_dim, R = rows_of(which);
  FLIDE_CHECK(qg.rows == R && q.rows == R && gate.rows == R && qg.cols == heads * 2 * hd &&
                  q.cols == heads * hd && gate.cols == q.cols && norm.size() == hd,
              "cuda attention_query: qg [", qg.rows, ", ", qg.cols, "] q [", q.rows, ", ", q.cols,
              "] gate [", gate.rows, ", ", gate.cols, "] norm ", norm.size(), " rows ", R,
              " heads ", heads, " hd ", hd);
  const bf16* qgp = as_bf16(qg, "attention_query", "qg");
  const bf16* np = as_bf16(norm, "attention_query", "norm");
  bf16* qp = as_bf16(q, "attention_query", "q");
  bf16* gp = as_bf16(gate, "attention_query", "gate");
  if (R == 0) return;
  if (!op_begin({qg, norm, q, gate}, {int64_t(which), heads, head_dim, rot_dim})) return;
  launched(
      kernels::attention_prep(qgp, qg.cols, 2 * hd, qp, gp, np, meta_.positions, rows_ptr(which), R,
                              heads, head_dim, rot_dim, float(eps), float(theta), stream_),
      "attention_query");
}

void CudaOps::attention_key(View k, View norm, int heads, int head_dim, int rot_dim, double theta,
                            double eps) {
  need_stream("attention_key");
  check_rope_dims("attention_key", head_dim, rot_dim);
  const int64_t hd = head_dim;
  FLIDE_CHECK(k.rows == meta_.n_tokens && k.cols == heads * hd && norm.size() == hd,
              "cuda attention_key: k [", k.rows, ", ", k.cols, "] norm ", norm.size(), " tokens ",
              meta_.n_tokens, " heads ", heads, " hd ", hd);
  bf16* kp = as_bf16(k, "attention_key", "k");
  const bf16* np = as_bf16(norm, "attention_key", "norm");
  if (k.size() == 0) return;
  if (!op_begin({k, norm}, {heads, head_dim, rot_dim})) return;
  launched(
      kernels::attention_prep(kp, k.cols, hd, kp, nullptr, np, meta_.positions, nullptr, k.rows,
                              heads, head_dim, rot_dim, float(eps), float(theta), stream_),
      "attention_key");
}

void CudaOps::attention(View q, View k, View v, View out, Rows which, int heads_q, int heads_kv,
                        int head_dim, double scale) {
  run_attention("attention", q, nullptr, k, v, out, which, heads_q, heads_kv, head_dim, scale);
}

// The gate applied in the attention's store (sigmoid_mul's rounding).
void CudaOps::attention_gated(View q, View gate, View k, View v, View out, Rows which, int heads_q,
                              int heads_kv, int head_dim, double scale) {
  FLIDE_CHECK(gate.rows == q.rows && gate.cols == q.cols, "cuda attention_gated: gate [", gate.rows,
              ", ", gate.cols, "] q [", q.rows, ", ", q.cols, "]");
  FLIDE_CHECK(!overlaps(out, gate), "cuda attention_gated: out may not share memory with gate");
  run_attention("attention_gated", q, &gate, k, v, out, which, heads_q, heads_kv, head_dim, scale);
}

// The out rows' attention at head dim 256 (the last layer's: one row a question) with the keys of
// each tile split over 16 CTAs, 12 for its trunk's blocks and 4 for its questions' own
// (kernels::AttentionSplit): unsplit, a round of 4 QuALITY requests ran it on 8 CTAs. Fixed
// counts, so that a row's bits never depend on the round.
kernels::AttentionSplit CudaOps::out_rows_split(Rows which, int64_t R, int heads_q, int head_dim) {
  if (which != Rows::Rows_out || head_dim != 256 || R == 0) return {};
  kernels::AttentionSplit split{nullptr, 12, 4};
  split.partial =
      as_f32(scratch_f32(1, kernels::attention_split_floats(R, heads_q, head_dim, split)),
             "attention", "partial");
  return split;
}

void CudaOps::run_attention(const char* name, View q, const View* gate, View k, View v, View out,
                            Rows which, int heads_q, int heads_kv, int head_dim, double scale) {
  need_stream(name);
  const int64_t hd = head_dim, R = rows_of(which);
  check_attention_kv(name, k, v, meta_.n_tokens, heads_q, heads_kv, head_dim);
  FLIDE_CHECK(q.rows == R && out.rows == R && q.cols == heads_q * hd && out.cols == q.cols, "cuda ",
              name, ": q [", q.rows, ", ", q.cols, "] out [", out.rows, ", ", out.cols, "] rows ",
              R);
  const bf16* qp = as_bf16(q, name, "q");
  const bf16* kp = as_bf16(k, name, "k");
  const bf16* vp = as_bf16(v, name, "v");
  bf16* op = as_bf16(out, name, "out");
  const kernels::AttentionGate g =
      gate ? kernels::AttentionGate{as_bf16(*gate, name, "gate"), q.cols, hd}
           : kernels::AttentionGate{};
  if (R == 0) return;
  const bool all = which == Rows::Rows_all;
  const kernels::AttentionSplit split = out_rows_split(which, R, heads_q, head_dim);
  if (!op_begin({q, k, v, out, gate ? *gate : View{}}, {int64_t(which), heads_q, heads_kv})) return;
  cudaError_t err = kernels::tree_attention(
      qp, kp, vp, op, rows_ptr(which), R, meta_, all ? plan_all_ : plan_out_,
      all ? tiles_all_ : tiles_out_, heads_q, heads_kv, head_dim, float(scale), stream_, g, split);
  if (err == cudaSuccess && all) err = zero_padding_rows(op, out.cols);
  launched(err, name);
}

// Not needed for the padding out rows (Rows_out): nothing reads what they hold, since the padding
// select entries read out row 0.
cudaError_t CudaOps::zero_padding_rows(bf16* out, int64_t cols) {
  if (!padded_) return cudaSuccess;
  return kernels::zero_rows_of_no_node(out, meta_.n_tokens, cols, meta_.token_node, stream_);
}

// attention_query's pass without its gate copy, then the attention with the gate in its store
// (sigmoid_mul's rounding): the gate halves are read once, where they are used.
void CudaOps::gated_attention(View qg, View q_norm, View k, View v, View out, Rows which,
                              int heads_q, int heads_kv, int head_dim, int rot_dim, double theta,
                              double eps, double scale) {
  need_stream("gated_attention");
  check_rope_dims("gated_attention", head_dim, rot_dim);
  const int64_t hd = head_dim, R = rows_of(which);
  check_attention_kv("gated_attention", k, v, meta_.n_tokens, heads_q, heads_kv, head_dim);
  FLIDE_CHECK(qg.rows == R && out.rows == R && qg.cols == heads_q * 2 * hd &&
                  out.cols == heads_q * hd && q_norm.size() == hd,
              "cuda gated_attention: qg [", qg.rows, ", ", qg.cols, "] out [", out.rows, ", ",
              out.cols, "] norm ", q_norm.size(), " rows ", R, " heads ", heads_q, " hd ", hd);
  FLIDE_CHECK(!overlaps(out, qg), "cuda gated_attention: out may not share memory with qg");
  const bf16* qgp = as_bf16(qg, "gated_attention", "qg");
  const bf16* np = as_bf16(q_norm, "gated_attention", "q_norm");
  const bf16* kp = as_bf16(k, "gated_attention", "k");
  const bf16* vp = as_bf16(v, "gated_attention", "v");
  bf16* op = as_bf16(out, "gated_attention", "out");
  if (R == 0) return;
  View q = scratch(R, out.cols);
  bf16* qp = as_bf16(q, "gated_attention", "q");
  const bool all = which == Rows::Rows_all;
  const kernels::AttentionSplit split = out_rows_split(which, R, heads_q, head_dim);
  if (!op_begin({qg, q_norm, k, v, out}, {int64_t(which), heads_q, heads_kv, rot_dim})) return;
  cudaError_t err = kernels::attention_prep(qgp, qg.cols, 2 * hd, qp, nullptr, np, meta_.positions,
                                            rows_ptr(which), R, heads_q, head_dim, rot_dim,
                                            float(eps), float(theta), stream_);
  if (err == cudaSuccess)
    err = kernels::tree_attention(qp, kp, vp, op, rows_ptr(which), R, meta_,
                                  all ? plan_all_ : plan_out_, all ? tiles_all_ : tiles_out_,
                                  heads_q, heads_kv, head_dim, float(scale), stream_,
                                  kernels::AttentionGate{qgp + hd, qg.cols, 2 * hd}, split);
  if (err == cudaSuccess && all) err = zero_padding_rows(op, out.cols);
  launched(err, "gated_attention");
}

// One GEMM (kernels::attention_projections) where the kernel takes the shapes, else Ops' matmuls,
// attention_query and attention_key; the same bits either way.
void CudaOps::attention_projections(View h, View w_q, View w_k, View w_v, View q_norm, View k_norm,
                                    View q, View gate, View k, View v, int heads_q, int heads_kv,
                                    int head_dim, int rot_dim, double theta, double eps) {
  need_stream("attention_projections");
  check_rope_dims("attention_projections", head_dim, rot_dim);
  const int64_t T = h.rows, K = h.cols, hd = head_dim;
  const int64_t Cq = heads_q * hd, Ckv = heads_kv * hd;
  FLIDE_CHECK(T == meta_.n_tokens && w_q.rows == 2 * Cq && w_q.cols == K && w_k.rows == Ckv &&
                  w_k.cols == K && w_v.rows == Ckv && w_v.cols == K && q_norm.size() == hd &&
                  k_norm.size() == hd && q.rows == T && q.cols == Cq && gate.rows == T &&
                  gate.cols == Cq && k.rows == T && k.cols == Ckv && v.rows == T && v.cols == Ckv,
              "cuda attention_projections: h [", T, ", ", K, "] w_q [", w_q.rows, ", ", w_q.cols,
              "] w_k [", w_k.rows, ", ", w_k.cols, "] w_v [", w_v.rows, ", ", w_v.cols, "] q [",
              q.rows, ", ", q.cols, "] gate [", gate.rows, ", ", gate.cols, "] k [", k.rows, ", ",
              k.cols, "] v [", v.rows, ", ", v.cols, "] norms ", q_norm.size(), ", ", k_norm.size(),
              " heads ", heads_q, "/", heads_kv, " hd ", hd, " tokens ", meta_.n_tokens);
  for (const View* out : {&q, &gate, &k, &v})
    FLIDE_CHECK(!overlaps(*out, h), "cuda attention_projections: an output shares memory with h");
  const char* name = "attention_projections";
  const bf16* hp = as_bf16(h, name, "h");
  const bf16* wqp = as_bf16(w_q, name, "w_q");
  const bf16* wkp = as_bf16(w_k, name, "w_k");
  const bf16* wvp = as_bf16(w_v, name, "w_v");
  const bf16* qnp = as_bf16(q_norm, name, "q_norm");
  const bf16* knp = as_bf16(k_norm, name, "k_norm");
  bf16* qp = as_bf16(q, name, "q");
  bf16* gp = as_bf16(gate, name, "gate");
  bf16* kp = as_bf16(k, name, "k");
  bf16* vp = as_bf16(v, name, "v");
  if (!kernels::attention_projections_supported(hp, wqp, wkp, wvp, qnp, knp, qp, gp, kp, vp, K,
                                                head_dim, rot_dim))
    return Ops::attention_projections(h, w_q, w_k, w_v, q_norm, k_norm, q, gate, k, v, heads_q,
                                      heads_kv, head_dim, rot_dim, theta, eps);
  if (T == 0) return;
  const kernels::Fp8Rows wq8 = fp8_weight(w_q), wk8 = fp8_weight(w_k), wv8 = fp8_weight(w_v);
  if (wq8.data && wk8.data && wv8.data) {
    const kernels::Fp8Rows h8 = quantized(h);
    if (!op_begin_shaped({h, w_q, w_k, w_v, q_norm, k_norm, q, gate, k, v},
                         {heads_q, heads_kv, head_dim, rot_dim, 1}, T, 2 * (Cq + Ckv), K))
      return;
    launched(kernels::attention_projections_fp8(h8, wq8, wk8, wv8, qnp, knp, meta_.positions, qp,
                                                gp, kp, vp, T, K, heads_q, heads_kv, head_dim,
                                                rot_dim, float(eps), float(theta), stream_),
             name);
    return;
  }
  if (!op_begin_shaped({h, w_q, w_k, w_v, q_norm, k_norm, q, gate, k, v},
                       {heads_q, heads_kv, head_dim, rot_dim}, T, 2 * (Cq + Ckv), K))
    return;
  launched(kernels::attention_projections(hp, wqp, wkp, wvp, qnp, knp, meta_.positions, qp, gp, kp,
                                          vp, T, K, heads_q, heads_kv, head_dim, rot_dim,
                                          float(eps), float(theta), stream_),
           name);
}

// ---- Gated DeltaNet ----

void CudaOps::gdn_conv(View x, View w, View window, View q, View k, View v, int dim_k, double eps,
                       int level) {
  need_stream("gdn_conv");
  check_level(level, "gdn_conv");
  const int64_t C = x.cols, K = w.cols, Kd = q.cols, Vd = v.cols, Dk = dim_k, T = meta_.n_tokens;
  FLIDE_CHECK(Dk > 0 && Kd % Dk == 0 && k.cols == Kd && C == 2 * Kd + Vd, "cuda gdn_conv: x cols ",
              C, " q ", q.cols, " k ", k.cols, " v ", v.cols, " dim_k ", Dk,
              " (x must be [q | k | v])");
  FLIDE_CHECK(x.rows == T && q.rows == T && k.rows == T && v.rows == T && w.rows == C,
              "cuda gdn_conv: rows x ", x.rows, " q ", q.rows, " k ", k.rows, " v ", v.rows,
              " tokens ", T, "; w [", w.rows, ", ", w.cols, "]");
  FLIDE_CHECK(K >= 1 && K <= 8, "cuda gdn_conv: kernel ", K, " (the kernel takes <= 8)");
  FLIDE_CHECK(window.cols == (K - 1) * C && window.rows >= n_slots_, "cuda gdn_conv: window [",
              window.rows, ", ", window.cols, "] slots ", n_slots_);
  // A key head is reduced within one warp, several channels a lane (kernels/gdn.h).
  FLIDE_CHECK(kernels::gdn_conv_shape_ok(dim_k, Vd), "cuda gdn_conv: key head dim ", Dk,
              " with value width ", Vd,
              " (the kernel takes Dk <= 32, or <= 64 with Dk and Vd even, or <= 128 with both "
              "multiples of 4, or <= 256 with both multiples of 8)");
  FLIDE_CHECK(!overlaps(q, x) && !overlaps(k, x) && !overlaps(v, x),
              "cuda gdn_conv: q, k and v must not overlap x (the conv cannot run in place)");
  const bf16* xp = as_bf16(x, "gdn_conv", "x");
  const bf16* wp = as_bf16(w, "gdn_conv", "w");
  bf16* winp = as_bf16(window, "gdn_conv", "window");
  bf16* qp = as_bf16(q, "gdn_conv", "q");
  bf16* kp = as_bf16(k, "gdn_conv", "k");
  bf16* vp = as_bf16(v, "gdn_conv", "v");
  if (x.size() == 0) return;
  if (!op_begin({x, w, window, q, k, v}, {level, dim_k})) return;
  launched(kernels::gdn_conv(xp, wp, winp, qp, kp, vp, int(Kd / Dk), dim_k, Vd, int(K), float(eps),
                             level, meta_, stream_),
           "gdn_conv");
}

// One GEMM per level (kernels::gdn_qkv_conv) where the kernel takes the shapes, else Ops' matmul
// and convs. Like swiglu's, the fused kernel is batch-invariant by construction. A round where a
// node reads and writes the same window slot runs unfused (the kernel's tiles would race on it);
// that choice is part of the round's graph key.
void CudaOps::gdn_qkv_conv(View x, View w_qkv, View w_conv, View window, View q, View k, View v,
                           int dim_k, double eps, int n_levels) {
  need_stream("gdn_qkv_conv");
  const int64_t T = x.rows, H = x.cols, C = w_qkv.rows, Kd = q.cols, Vd = v.cols;
  FLIDE_CHECK(w_qkv.cols == H && n_levels == n_levels_, "cuda gdn_qkv_conv: x [", T, ", ", H,
              "] w_qkv [", C, ", ", w_qkv.cols, "] levels ", n_levels, " of ", n_levels_);
  const bf16* xp = as_bf16(x, "gdn_qkv_conv", "x");
  const bf16* wp = as_bf16(w_qkv, "gdn_qkv_conv", "w_qkv");
  bf16* qp = as_bf16(q, "gdn_qkv_conv", "q");
  bf16* kp = as_bf16(k, "gdn_qkv_conv", "k");
  bf16* vp = as_bf16(v, "gdn_qkv_conv", "v");
  bf16* winp = as_bf16(window, "gdn_qkv_conv", "window");
  const bf16* cp = as_bf16(w_conv, "gdn_qkv_conv", "w_conv");
  const bool fused = dim_k > 0 && Kd % dim_k == 0 && C == 2 * Kd + Vd && k.cols == Kd &&
                     T == meta_.n_tokens && q.rows == T && k.rows == T && v.rows == T &&
                     w_conv.rows == C && window.cols == (w_conv.cols - 1) * C &&
                     window.rows >= n_slots_ && !window_in_place_ &&
                     kernels::gdn_qkv_conv_supported(xp, wp, cp, winp, qp, kp, vp, H,
                                                     int(Kd / dim_k), dim_k, Vd, int(w_conv.cols));
  if (!fused) return Ops::gdn_qkv_conv(x, w_qkv, w_conv, window, q, k, v, dim_k, eps, n_levels);
  FLIDE_CHECK(!overlaps(q, x) && !overlaps(k, x) && !overlaps(v, x),
              "cuda gdn_qkv_conv: q, k and v must not overlap x");
  if (T == 0) return;
  const kernels::Fp8Rows w8 = fp8_weight(w_qkv);
  const kernels::Fp8Rows x8 = w8.data ? quantized(x) : kernels::Fp8Rows{};
  const int heads_k = int(Kd / dim_k);
  for (int level = 0; level < n_levels; ++level) {
    if (!op_begin({x, w_qkv, w_conv, window, q, k, v}, {level, dim_k, w8.data != nullptr}))
      continue;
    launched(w8.data ? kernels::gdn_qkv_conv_fp8(x8, w8, cp, winp, qp, kp, vp, T, H, heads_k, dim_k,
                                                 Vd, float(eps), level, meta_, stream_)
                     : kernels::gdn_qkv_conv(xp, wp, cp, winp, qp, kp, vp, T, H, heads_k, dim_k, Vd,
                                             float(eps), level, meta_, stream_),
             "gdn_qkv_conv");
  }
}

// One GEMM (kernels::z_gated_rmsnorm) where the kernel takes the shapes, else Ops' matmul and
// gated_rmsnorm; the same bits either way. Batch-invariant by construction, like swiglu's.
void CudaOps::z_gated_rmsnorm(View o, View h, View w_z, View w, View out, double eps) {
  z_gated_writing(o, h, w_z, w, out, eps, nullptr);
}

void CudaOps::z_gated_rmsnorm_into_product(View o, View h, View w_z, View w, View out, double eps,
                                           View w_next) {
  z_gated_writing(o, h, w_z, w, out, eps, &w_next);
}

void CudaOps::z_gated_writing(View o, View h, View w_z, View w, View out, double eps,
                              const View* w_next) {
  const int64_t M = h.rows, K = h.cols, Vd = w_z.rows, D = w.size();
  FLIDE_CHECK(w_z.cols == K && o.rows == M && out.rows == M && o.cols == Vd && out.cols == Vd &&
                  D > 0 && Vd % D == 0,
              "cuda z_gated_rmsnorm: o [", o.rows, ", ", o.cols, "] h [", M, ", ", K, "] w_z [", Vd,
              ", ", w_z.cols, "] w ", D, " out [", out.rows, ", ", out.cols, "]");
  FLIDE_CHECK(!overlaps(out, h) && !overlaps(out, o),
              "cuda z_gated_rmsnorm: out may not share memory with h or o");
  const bf16* hp = as_bf16(h, "z_gated_rmsnorm", "h");
  const bf16* zp = as_bf16(w_z, "z_gated_rmsnorm", "w_z");
  const bf16* op = as_bf16(o, "z_gated_rmsnorm", "o");
  const bf16* wp = as_bf16(w, "z_gated_rmsnorm", "w");
  bf16* outp = as_bf16(out, "z_gated_rmsnorm", "out");
  if (!kernels::z_gated_rmsnorm_supported(hp, zp, op, wp, outp, Vd, K, D))
    return Ops::z_gated_rmsnorm(o, h, w_z, w, out, eps);
  if (M == 0) return;
  if (const kernels::Fp8Rows z8 = fp8_weight(w_z); z8.data) {
    const kernels::Fp8Rows h8 = quantized(h);
    const kernels::Fp8Blocks out8 = w_next ? product_input_fp8(out, *w_next) : kernels::Fp8Blocks{};
    if (!op_begin_shaped({o, h, w_z, w, out}, {1, out8.data != nullptr}, M, Vd, K)) return;
    launched(
        kernels::z_gated_rmsnorm_fp8(h8, z8, op, wp, outp, out8, M, Vd, K, D, float(eps), stream_),
        "z_gated_rmsnorm");
    return;
  }
  if (!op_begin_shaped({o, h, w_z, w, out}, {}, M, Vd, K)) return;
  launched(kernels::z_gated_rmsnorm(hp, zp, op, wp, outp, M, Vd, K, D, float(eps), stream_),
           "z_gated_rmsnorm");
}

void CudaOps::gdn_gates(View ab, View A_log, View dt_bias, View g, View beta) {
  const int64_t Hv = g.cols;
  FLIDE_CHECK(ab.cols == 2 * Hv && g.rows == ab.rows && beta.rows == ab.rows && beta.cols == Hv &&
                  A_log.size() == Hv && dt_bias.size() == Hv,
              "cuda gdn_gates: ab [", ab.rows, ", ", ab.cols, "] g [", g.rows, ", ", g.cols,
              "] beta [", beta.rows, ", ", beta.cols, "] A_log ", A_log.size(), " dt_bias ",
              dt_bias.size());
  const bf16* abp = as_bf16(ab, "gdn_gates", "ab");
  const bf16* alp = as_bf16(A_log, "gdn_gates", "A_log");
  const bf16* dtp = as_bf16(dt_bias, "gdn_gates", "dt_bias");
  float* gp = as_f32(g, "gdn_gates", "g");
  float* betap = as_f32(beta, "gdn_gates", "beta");
  if (g.size() == 0) return;
  if (!op_begin({ab, A_log, dt_bias, g, beta})) return;
  launched(kernels::gdn_gates(abp, alp, dtp, gp, betap, ab.rows, int(Hv), stream_), "gdn_gates");
}

void CudaOps::gdn(View q, View k, View v, View g, View beta, View state, View out, int level,
                  int heads_k, int heads_v, int dim_k, int dim_v, GdnForm /*form*/) {
  need_stream("gdn");
  check_level(level, "gdn");
  const int64_t Dk = dim_k, Dv = dim_v, T = meta_.n_tokens;
  FLIDE_CHECK(heads_k > 0 && heads_v % heads_k == 0, "cuda gdn: heads ", heads_k, " / ", heads_v);
  FLIDE_CHECK(
      q.rows == T && k.rows == T && v.rows == T && g.rows == T && beta.rows == T && out.rows == T,
      "cuda gdn: rows q ", q.rows, " k ", k.rows, " v ", v.rows, " g ", g.rows, " beta ", beta.rows,
      " out ", out.rows, " stream ", T);
  FLIDE_CHECK(q.cols == heads_k * Dk && k.cols == q.cols && v.cols == heads_v * Dv &&
                  out.cols == v.cols && g.cols == heads_v && beta.cols == heads_v,
              "cuda gdn: cols q ", q.cols, " k ", k.cols, " v ", v.cols, " g ", g.cols, " out ",
              out.cols);
  FLIDE_CHECK(state.cols == heads_v * Dk * Dv && state.rows >= n_slots_, "cuda gdn: state [",
              state.rows, ", ", state.cols, "] slots ", n_slots_);
  const bf16* qp = as_bf16(q, "gdn", "q");
  const bf16* kp = as_bf16(k, "gdn", "k");
  const bf16* vp = as_bf16(v, "gdn", "v");
  const float* gp = as_f32(g, "gdn", "g");
  const float* betap = as_f32(beta, "gdn", "beta");
  float* sp = as_f32(state, "gdn", "state");
  bf16* op = as_bf16(out, "gdn", "out");
  FLIDE_CHECK(((Dk == 8 || Dk == 12 || Dk == 16 || Dk == 24) &&
               (Dv == 8 || Dv == 12 || Dv == 16 || Dv == 24)) ||
                  (Dk == 128 && Dv == 128),
              "cuda gdn: head dims ", Dk, "x", Dv,
              " (the kernel takes Dk, Dv in {8, 12, 16, 24}, or both 128)");
  if (T == 0) return;
  grow(gdn_workspace_, gdn_workspace_cap_, kernels::gdn_workspace_bytes(T, heads_v), "gdn");
  if (!op_begin({q, k, v, g, beta, state, out}, {level, heads_k, heads_v})) return;
  cudaError_t err = kernels::gdn_chunked(qp, kp, vp, gp, betap, sp, op, gdn_workspace_, heads_k,
                                         heads_v, dim_k, dim_v, level, meta_, stream_);
  if (err == cudaSuccess && level == 0) err = zero_padding_rows(op, out.cols);
  launched(err, "gdn");
}

void CudaOps::gated_rmsnorm(View o, View z, View w, View out, double eps) {
  const int64_t D = o.cols;
  FLIDE_CHECK(
      z.rows == o.rows && z.cols == D && out.rows == o.rows && out.cols == D && w.size() == D,
      "cuda gated_rmsnorm: o [", o.rows, ", ", D, "] z [", z.rows, ", ", z.cols, "] w ", w.size(),
      " out [", out.rows, ", ", out.cols, "]");
  const bf16* op = as_bf16(o, "gated_rmsnorm", "o");
  const bf16* zp = as_bf16(z, "gated_rmsnorm", "z");
  const bf16* wp = as_bf16(w, "gated_rmsnorm", "w");
  bf16* outp = as_bf16(out, "gated_rmsnorm", "out");
  if (o.size() == 0) return;
  if (!op_begin({o, z, w, out})) return;
  launched(kernels::gated_rmsnorm(op, zp, wp, outp, o.rows, D, float(eps), stream_),
           "gated_rmsnorm");
}

// ---- readout ----

void CudaOps::select_logits(View h, View w, View out) {
  need_stream("select_logits");
  const int64_t M = n_select_, H = h.cols;
  FLIDE_CHECK(w.cols == H && out.rows == M && out.cols == 1 && h.rows == n_out_,
              "cuda select_logits: h [", h.rows, ", ", H, "] w [", w.rows, ", ", w.cols, "] out [",
              out.rows, ", ", out.cols, "] selects ", M, " out rows ", n_out_);
  FLIDE_CHECK(max_select_id_ < w.rows, "select id ", max_select_id_, " outside the LM head of ",
              w.rows);
  const bf16* hp = as_bf16(h, "select_logits", "h");
  const bf16* wp = as_bf16(w, "select_logits", "w");
  float* outp = as_f32(out, "select_logits", "out");
  if (M == 0) return;
  if (!op_begin({h, w, out})) return;
  launched(kernels::select_logits(hp, wp, select_out_, select_ids_, outp, M, H, stream_),
           "select_logits");
}

}  // namespace flide
