// The narrow op interface the model is written against (STYLE.md #2). A backend owns memory
// of one compute type (CPU: f32 or f64; CUDA: bf16 activations with f32 recurrent state) and
// implements these ops over non-owning views. Per-round metadata (tree structure, positions,
// readout rows) arrives once through set_stream; no op allocates.
//
// Layout convention, used everywhere: a View is a row-major [rows, cols] block; a token-major
// activation is [T, features]; a weight is PyTorch nn.Linear layout [out, in], and
// matmul computes out = x . w^T. Head-split tensors are [T, heads * head_dim], head-major within
// a row, and may be re-viewed as [T * heads, head_dim] without copying.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/stream.h"
#include "core/dtype.h"
#include "core/error.h"

namespace flide {

// A position in the scratch arena (opaque to callers).
struct ScratchMark {
  const void* block = nullptr;  // the block being carved at the mark
  int64_t used = 0;             // how much of it was handed out
};

// A readout on its way to the host (Ops::download_async).
struct Readback {
  std::vector<double> values;  // a synchronous backend fills them at once; fetch returns them
  int64_t count = 0;           // elements
  int32_t slot = -1;           // an asynchronous backend's landing buffer
};

struct View {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::DType_f32;  // element type, set by the backend that made the view

  int64_t size() const { return rows * cols; }
  // The same memory seen as [rows * cols / cols_new, cols_new].
  View reshaped(int64_t cols_new) const { return {data, rows * cols / cols_new, cols_new, dtype}; }
  // The first n rows (a view of the same memory).
  View first_rows(int64_t n) const { return {data, n, cols, dtype}; }
};

// Whether two views share any byte (for ops that cannot run in place).
inline bool overlaps(const View& a, const View& b) {
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return pa < pb + b.size() * int64_t(dtype_size(b.dtype)) &&
         pb < pa + a.size() * int64_t(dtype_size(a.dtype));
}

// Which stream rows a query-side tensor holds: every row, or only Stream::out_rows (the last
// layer under selective readout).
enum class Rows : uint8_t { Rows_all, Rows_out };

enum class GdnForm : uint8_t { GdnForm_chunked, GdnForm_recurrent };

class Ops {
 public:
  virtual ~Ops() = default;
  virtual DType dtype() const = 0;

  // ---- memory ----
  // Persistent arena (weights): zero-initialised, valid for the backend's lifetime.
  virtual View alloc(int64_t rows, int64_t cols) = 0;
  // Scratch arena (activations, per-round state slots): valid until the next reset_scratch,
  // which rewinds it. Blocks are kept and merged at reset, so a steady workload stops
  // allocating after its first round. Contents are unspecified (callers overwrite).
  virtual View scratch(int64_t rows, int64_t cols) = 0;
  // Scratch of at least float32 precision (CPU: the compute type; CUDA: float32) for what
  // low precision would ruin: recurrent state, decay gates, logits.
  virtual View scratch_f32(int64_t rows, int64_t cols) = 0;
  virtual void reset_scratch() = 0;
  // Scratch taken after a mark is handed out again after rewinding to it: the model releases a
  // layer's temporaries this way, so a round needs one layer's activations, not all of them.
  // Ops already queued keep their memory valid (one stream, in order).
  virtual ScratchMark scratch_mark() const = 0;
  virtual void scratch_rewind(const ScratchMark& mark) = 0;
  virtual void upload(View dst, const float* src) = 0;  // host float -> dst (exact for f32/f64)
  virtual void download(View src, double* dst) = 0;     // dst -> host double
  virtual void fill_zero(View dst) = 0;
  virtual void set_stream(const Stream& stream) = 0;  // metadata for the round
  virtual void synchronize() = 0;  // waits for all queued work (timing; CPU: nothing to wait for)
  // w (loaded) is the weight of one of the fused products (swiglu, gdn_qkv_conv, z_gated_rmsnorm,
  // attention_projections): a backend that computes them in lower precision keeps a copy of it in
  // that form beside it (CUDA under Quantization_fp8). The others ignore it; w stays as it was.
  virtual void quantize_weight(View /*w*/) {}
  // w (loaded) is the weight of a product that reads the output of swiglu_into_product or
  // z_gated_rmsnorm_into_product (the MLP's down projection, the GDN layer's output projection):
  // a backend that computes it in lower precision keeps a copy of it in that form (CUDA under
  // Quantization_fp8: e4m3 with a scale per 128 x 128 tile). The others ignore it.
  virtual void quantize_output_weight(View /*w*/) {}

  // ---- rounds in flight ----
  // So that the host can prepare the next round while the device computes this one, a round's
  // readout leaves the device without waiting for it: download_async queues the copy of src
  // behind the work queued so far and returns; fetch waits for that copy and returns what
  // download would have written. At most four readbacks are unfetched at a time (two rounds of
  // two readouts). mark_tail records where a round's last layers begin, and wait_tail returns
  // once the device has reached the latest mark: the moment to prepare the next round. The
  // defaults are a synchronous backend's (CPU), whose work is done when the op returns.
  virtual bool asynchronous() const { return false; }
  virtual Readback download_async(View src) {
    Readback r;
    r.count = src.size();
    r.values.resize(size_t(r.count));
    download(src, r.values.data());
    return r;
  }
  virtual std::vector<double> fetch(Readback& readback) { return std::move(readback.values); }
  virtual void mark_tail() {}
  virtual void wait_tail() {}

  // ---- dense ----
  // out[T, H] = table[token_ids[t]]
  virtual void embed(View table, View out) = 0;
  // out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * (unit_offset ? 1 + w : w); w is [1, x.cols].
  // out may alias x (in-place normalisation).
  virtual void rmsnorm(View x, View w, View out, double eps, bool unit_offset) = 0;
  // rmsnorm whose output the fused products (swiglu, gdn_qkv_conv, z_gated_rmsnorm,
  // attention_projections) read next, the caller writing nothing into it before they have and
  // making no other such norm until they have: a backend that runs them on FP8 operands writes
  // their FP8 form in the same pass (CUDA under Quantization_fp8).
  virtual void rmsnorm_into_products(View x, View w, View out, double eps, bool unit_offset) {
    rmsnorm(x, w, out, eps, unit_offset);
  }
  // out[R, N] = x[R, K] . w[N, K]^T
  virtual void matmul(View x, View w, View out) = 0;
  // acc[R, N] += x[R, K] . w[N, K]^T, added in the product's accumulation (CUDA: fp32, acc's
  // bf16 read in and the sum rounded once): a residual add in the product that feeds it, so the
  // residual is read and written once with the product's output instead of the product being
  // written and read back by a separate add.
  virtual void matmul_add(View x, View w, View acc) = 0;
  // out = silu(gate) * up; out may alias gate or up
  virtual void silu_mul(View gate, View up, View out) = 0;
  // out[R, N] = silu(x . w_gate^T) * (x . w_up^T), the MLP's SwiGLU on x [R, K], w_gate and w_up
  // [N, K]; out may not share memory with x (the products read x after out is written). By
  // default the two products and silu_mul, the up product in scratch; a backend may fuse them
  // (CUDA: one GEMM that writes only out), rounding as these steps do.
  virtual void swiglu(View x, View w_gate, View w_up, View out) {
    FLIDE_CHECK(!overlaps(x, out), "swiglu: out shares memory with x");
    View up = scratch(out.rows, out.cols);
    matmul(x, w_gate, out);
    matmul(x, w_up, up);
    silu_mul(out, up, out);
  }
  // swiglu whose out only matmul_add(out, w_next, ...), called next, reads: a backend that runs
  // that product on FP8 operands (CUDA under Quantization_fp8, w_next with its
  // quantize_output_weight copy) writes out's FP8 form alone, and out's bf16 is left unwritten.
  // The others run swiglu.
  virtual void swiglu_into_product(View x, View w_gate, View w_up, View out, View /*w_next*/) {
    swiglu(x, w_gate, w_up, out);
  }
  // x *= sigmoid(gate)
  virtual void sigmoid_mul(View x, View gate) = 0;
  // out[R, C] = x[out_rows[r]] (Stream::out_rows)
  virtual void gather_rows(View x, View out) = 0;

  // ---- gated attention ----
  // The query side: qg [R, heads * 2 * hd] holds per head [query(hd) | gate(hd)] (R: the stream
  // rows `which` selects). q [R, heads * hd] = rope(rmsnorm(query) * (1 + norm)), gate [R,
  // heads * hd] = the gate halves; norm [1, hd], the query's rms_norm_eps `eps`. RoPE is NeoX
  // rotate-half on the first rot_dim dims of every head, by each row's stream position. The
  // compute type rounds the normed value and the rotated one (HF: q_norm, then
  // apply_rotary_pos_emb).
  virtual void attention_query(View qg, View norm, View q, View gate, Rows which, int heads,
                               int head_dim, int rot_dim, double theta, double eps) = 0;
  // The key side in place: k [T, heads * hd] = rope(rmsnorm(k) * (1 + norm)), as above.
  virtual void attention_key(View k, View norm, int heads, int head_dim, int rot_dim, double theta,
                             double eps) = 0;
  // Tree attention: each query row (stream rows per `which`) attends to the K/V rows of its
  // node's ancestors and its own node up to itself; softmax(q.k * scale) . v; GQA with
  // query head h using kv head h / (heads_q / heads_kv). q/out [R, heads_q*hd], k/v [T,
  // heads_kv*hd].
  virtual void attention(View q, View k, View v, View out, Rows which, int heads_q, int heads_kv,
                         int head_dim, double scale) = 0;
  // out = attention(q, k, v) * sigmoid(gate), gate [R, heads_q * hd]. By default attention then
  // sigmoid_mul; a backend may fuse them (CUDA: the gate applied in the attention's store),
  // rounding as these steps do.
  virtual void attention_gated(View q, View gate, View k, View v, View out, Rows which, int heads_q,
                               int heads_kv, int head_dim, double scale) {
    attention(q, k, v, out, which, heads_q, heads_kv, head_dim, scale);
    sigmoid_mul(out, gate);
  }
  // The query side, attention and the output gate: attention_gated with q and gate from qg as
  // attention_query makes them (norm q_norm, the query's RoPE and eps), k and v ready. By default
  // those ops (q and gate in scratch); a backend may fuse them (CUDA: the gate read from qg in the
  // attention's store, never copied out), rounding as these steps do.
  virtual void gated_attention(View qg, View q_norm, View k, View v, View out, Rows which,
                               int heads_q, int heads_kv, int head_dim, int rot_dim, double theta,
                               double eps, double scale) {
    const int64_t C = int64_t(heads_q) * head_dim;
    View q = scratch(qg.rows, C), gate = scratch(qg.rows, C);
    attention_query(qg, q_norm, q, gate, which, heads_q, head_dim, rot_dim, theta, eps);
    attention_gated(q, gate, k, v, out, which, heads_q, heads_kv, head_dim, scale);
  }
  // A gated attention layer's projections over every stream row of h [T, H]: q and gate [T,
  // heads_q * hd] as attention_query makes them from qg = h . w_q^T (norm q_norm), k [T, heads_kv *
  // hd] as attention_key makes it from h . w_k^T (norm k_norm), v = h . w_v^T. By default the
  // three matmuls and those two ops (qg in scratch); a backend may fuse them (CUDA: one GEMM whose
  // epilogue norms and turns the query and key heads), rounding as these steps do.
  virtual void attention_projections(View h, View w_q, View w_k, View w_v, View q_norm, View k_norm,
                                     View q, View gate, View k, View v, int heads_q, int heads_kv,
                                     int head_dim, int rot_dim, double theta, double eps) {
    View qg = scratch(h.rows, w_q.rows);
    matmul(h, w_q, qg);
    matmul(h, w_k, k);
    matmul(h, w_v, v);
    attention_query(qg, q_norm, q, gate, Rows::Rows_all, heads_q, head_dim, rot_dim, theta, eps);
    attention_key(k, k_norm, heads_kv, head_dim, rot_dim, theta, eps);
  }

  // ---- Gated DeltaNet ----
  // Depthwise causal conv (kernel K = w.cols, no bias) + SiLU over the C = x.cols = 2 Kd + Vd
  // channels of the packed projection x [T, C] for the nodes of one tree level, written split:
  // q [T, Kd] = channels [0, Kd), k [T, Kd] = [Kd, 2 Kd), v [T, Vd] = [2 Kd, C), with every
  // dim_k-wide head of q and k divided by sqrt(sum(x^2) + eps) (L2 norm, eps inside the sqrt).
  // A node's history before its first row is its slot_in window (zeros without one); a node with
  // slot_out writes its last K-1 inputs (of its whole path). window: [slots, (K-1) * C], raw
  // pre-conv inputs, oldest row first. q, k and v must not overlap x.
  virtual void gdn_conv(View x, View w, View window, View q, View k, View v, int dim_k, double eps,
                        int level) = 0;
  // The projection x [T, H] . w_qkv^T ([C, H]) and then gdn_conv of every level in turn, for
  // n_levels levels. By default the matmul (the packed projection in scratch) and the conv per
  // level; a backend may fuse them (CUDA: one GEMM whose epilogue runs the conv), rounding as
  // these steps do.
  virtual void gdn_qkv_conv(View x, View w_qkv, View w_conv, View window, View q, View k, View v,
                            int dim_k, double eps, int n_levels) {
    View qkv = scratch(x.rows, w_qkv.rows);
    matmul(x, w_qkv, qkv);
    for (int level = 0; level < n_levels; ++level)
      gdn_conv(qkv, w_conv, window, q, k, v, dim_k, eps, level);
  }
  // g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b); ab [T, 2 Hv] holds a | b side
  // by side (in_proj_a and in_proj_b as one product), g, beta [T, Hv]; A_log, dt_bias [1, Hv].
  virtual void gdn_gates(View ab, View A_log, View dt_bias, View g, View beta) = 0;
  // Delta rule over the nodes of one tree level, each starting from its slot_in state (zeros
  // without one) and writing its final state to slot_out. q, k [T, Hk*Dk] (L2-normed; q is scaled
  // by Dk^-1/2 here), v [T, Hv*Dv], g, beta [T, Hv], out [T, Hv*Dv];
  // state [slots, Hv * Dk * Dv], per head S[Dk][Dv]. Value head j reads key head j / (Hv/Hk).
  virtual void gdn(View q, View k, View v, View g, View beta, View state, View out, int level,
                   int heads_k, int heads_v, int dim_k, int dim_v, GdnForm form) = 0;
  // out = rmsnorm(o) * w * silu(z) per row of o/z [R, Dv] (no unit offset), w [1, Dv].
  virtual void gated_rmsnorm(View o, View z, View w, View out, double eps) = 0;
  // gated_rmsnorm with its gate z = h . w_z^T [R, Hv * Dv] made here, per head of Dv = w.size()
  // columns: o and out [R, Hv * Dv], h [R, K], w_z [Hv * Dv, K]. By default matmul (z in
  // scratch) then gated_rmsnorm; a backend may fuse them (CUDA: the norm in the product's
  // epilogue, z never written), rounding as these steps do.
  virtual void z_gated_rmsnorm(View o, View h, View w_z, View w, View out, double eps) {
    View z = scratch(h.rows, w_z.rows);
    matmul(h, w_z, z);
    const int64_t D = w.size();
    gated_rmsnorm(o.reshaped(D), z.reshaped(D), w, out.reshaped(D), eps);
  }
  // z_gated_rmsnorm whose out only matmul_add(out, w_next, ...), called next, reads (as
  // swiglu_into_product).
  virtual void z_gated_rmsnorm_into_product(View o, View h, View w_z, View w, View out, double eps,
                                            View /*w_next*/) {
    z_gated_rmsnorm(o, h, w_z, w, out, eps);
  }

  // ---- readout ----
  // out[m] = h[select_out[m]] . w[select_ids[m]] for the Stream's select entries; h [R, H],
  // w [V, H], out [M, 1].
  virtual void select_logits(View h, View w, View out) = 0;

  // ---- diagnostics ----
  // Per-op device time (CUDA: backend/cuda/profiler.h): turning profiling on starts a fresh
  // profile; profile_report() is a table of time per op since then. These two, set_graphs and the
  // op replay below are the only non-pure members: no-ops by default because the CPU backend has
  // nothing to report (its ops run synchronously; a host profiler sees them), and the model never
  // calls them, so the op interface above stays what the model is written against; only front ends
  // (flide bench --profile, --replay-ops) reach them through an Ops&.
  virtual void set_profiling(bool /*enable*/) {}
  virtual std::string profile_report() { return {}; }
  // CUDA graphs: whether rounds padded to a capacity bucket (Stream::padded) are captured once
  // per bucket and replayed (backend/cuda/cuda_ops.h). Returns whether graphs are on after the
  // call: false on a backend without them (CPU), which is why front ends pad rounds only when
  // it returns true. Off by default; the model never calls it.
  virtual bool set_graphs(bool /*enable*/) { return false; }
  // Per-op replay, for attributing the GPU's energy to ops: while set_op_capture(true) holds
  // (turning it on drops the graphs of before), every op is captured into a CUDA graph of its
  // own, which is then launched (so rounds compute as usual, eagerly, without round graphs);
  // replay_ops then launches, for each op name in the order they were first called, all of that
  // name's graphs in order, again and again for about `seconds`; first the GPU left idle for as
  // long ("(none)"), last every op in turn ("(all)": the round). Its windows' times, on the steady
  // clock (CLOCK_MONOTONIC, what Python's time.monotonic reads), let a sampler of the GPU's energy
  // counter beside the process split the joules (bench/energy_by_op.py). The replays overwrite
  // the round's buffers; the next round starts afresh. Empty on a backend without graphs (CPU).
  struct OpReplay {
    std::string op;
    int64_t graphs_per_round = 0;  // the op's captured calls in one round
    int64_t rounds = 0;            // repetitions in the window (0: "(none)", nothing launched)
    double t0 = 0, t1 = 0;         // the window, steady-clock seconds
  };
  virtual void set_op_capture(bool /*enable*/) {}
  virtual std::vector<OpReplay> replay_ops(double /*seconds*/) { return {}; }
};

// The reference backend in DType_f32 or DType_f64 on `threads` cores (<= 0: OpenMP's default).
// batch_invariant: a row's results do not depend on how many other rows share its round (GEMMs
// in calls of a fixed row count; slower for small rounds).
std::unique_ptr<Ops> make_cpu_ops(DType dtype, int threads, bool batch_invariant = false);
// bf16 activations and weights, fp32 accumulation, state, gates and logits, on CUDA device
// `device`. Throws flide::Error when built without CUDA or when no such device exists.
// batch_invariant: a row's results do not depend on how many other rows share its round, i.e.
// on server load (the tree kernels never do; this pins the GEMM algorithms of few rows, which
// slows rounds of under 2,048 token rows).
//
// quantization: the precision of the fused products' operands (Ops::quantize_weight). none: bf16.
// fp8: e4m3 with a float scale per row of the activations (computed each round) and per output
// column of the weights (at load), as vLLM's `--quantization fp8` computes an unquantized
// checkpoint; the products accumulate in the tensor cores' FP8 accumulator (narrower than fp32 on
// Hopper) and everything else stays as in bf16, the other products (the output projections, the
// LM head) too.
enum class Quantization : uint8_t { Quantization_none, Quantization_fp8 };
std::unique_ptr<Ops> make_cuda_ops(int device, bool batch_invariant = false,
                                   Quantization quantization = Quantization::Quantization_none);

}  // namespace flide
