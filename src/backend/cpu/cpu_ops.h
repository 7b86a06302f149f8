// The CPU backend: the reference implementation of ops.h, in float or double (STYLE.md #8).
// Every op is a plain loop that follows the Hugging Face math line for line, so that a float64
// run can arbitrate disagreements; GEMMs go through OpenBLAS, and OpenMP splits the work over
// rows or heads at most. The class is defined here and its members are spread over a few files
// by area, each ending with explicit instantiations for float and double:
//   cpu_ops.cpp    construction, the persistent and scratch arenas, transfers, the stream
//                  (validated once per round, so that the ops index it without checks)
//   dense.cpp      embed, rmsnorm, matmul, matmul_add, silu_mul, sigmoid_mul, gather_rows
//   attention.cpp  the query and key sides (split, norm, RoPE), tree attention
//   gdn.cpp        gdn_conv (conv + SiLU, split, q/k L2 norm), gdn_gates, gdn (chunked and
//                  recurrent), gated_rmsnorm
//   readout.cpp    select_logits
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "backend/stream.h"
#include "core/error.h"

namespace flide {

// Scalar helpers in the compute type, written as PyTorch writes them.
template <typename T>
inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
template <typename T>
inline T silu(T x) {
  return x * sigmoid(x);
}
// F.softplus with beta = 1, threshold = 20: the input itself above the threshold.
template <typename T>
inline T softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}

template <typename T>
class CpuOps final : public Ops {
 public:
  // threads <= 0: OpenMP's default; batch_invariant: make_cpu_ops.
  CpuOps(int threads, bool batch_invariant);
  ~CpuOps() override;

  DType dtype() const override;

  View alloc(int64_t rows, int64_t cols) override;
  View scratch(int64_t rows, int64_t cols) override;
  View scratch_f32(int64_t rows, int64_t cols) override;
  void synchronize() override {}
  ScratchMark scratch_mark() const override { return {scratch_.block, scratch_.used}; }
  void scratch_rewind(const ScratchMark& mark) override;
  void reset_scratch() override;
  void upload(View dst, const float* src) override;
  void download(View src, double* dst) override;
  void fill_zero(View dst) override;
  void set_stream(const Stream& stream) override;

  void embed(View table, View out) override;
  void rmsnorm(View x, View w, View out, double eps, bool unit_offset) override;
  void matmul(View x, View w, View out) override;
  void matmul_add(View x, View w, View acc) override;
  void silu_mul(View gate, View up, View out) override;
  void sigmoid_mul(View x, View gate) override;
  void gather_rows(View x, View out) override;

  void attention_query(View qg, View norm, View q, View gate, Rows which, int heads, int head_dim,
                       int rot_dim, double theta, double eps) override;
  void attention_key(View k, View norm, int heads, int head_dim, int rot_dim, double theta,
                     double eps) override;
  void attention(View q, View k, View v, View out, Rows which, int heads_q, int heads_kv,
                 int head_dim, double scale) override;

  void gdn_conv(View x, View w, View window, View q, View k, View v, int dim_k, double eps,
                int level) override;
  void gdn_gates(View ab, View A_log, View dt_bias, View g, View beta) override;
  void gdn(View q, View k, View v, View g, View beta, View state, View out, int level, int heads_k,
           int heads_v, int dim_k, int dim_v, GdnForm form) override;
  void gated_rmsnorm(View o, View z, View w, View out, double eps) override;

  void select_logits(View h, View w, View out) override;

 private:
  static T* ptr(View v) { return static_cast<T*>(v.data); }
  // out = x . w^T + beta out (matmul: beta 0, matmul_add: beta 1).
  void gemm(View x, View w, View out, T beta);
  // The same with every output summed in one fixed order (dense.cpp: batch-invariant mode).
  void gemm_invariant(View x, View w, View out, T beta);
  // Rows a query-side tensor holds under `which`: the stream's tokens or its out rows.
  int64_t rows_of(Rows which) const;
  // Stream row of row r of a query-side tensor.
  int32_t stream_row(Rows which, int64_t r) const;
  // Nodes of one level: [level_begin[level], level_begin[level + 1]).
  void level_range(int level, int32_t* begin, int32_t* end) const;
  // The steps of attention_query / attention_key: the per-head split of qg, and NeoX RoPE in
  // place on x [rows_of(which), heads * head_dim].
  void split_query_gate(View qg, View q, View gate, int heads, int head_dim);
  void rope(View x, Rows which, int heads, int head_dim, int rot_dim, double theta);

  int threads_;
  bool batch_invariant_;
  Stream stream_;
  // Root-first ancestor chain of every node followed by the node itself:
  // path_nodes_[path_begin_[n] .. path_begin_[n + 1]).
  std::vector<int32_t> path_begin_;
  std::vector<int32_t> path_nodes_;

  struct FreeDeleter {
    void operator()(T* p) const;
  };
  using Block = std::unique_ptr<T, FreeDeleter>;
  // A bump allocator over owned blocks, handing out 64-byte aligned pieces of `block`.
  struct Arena {
    std::vector<Block> blocks;
    T* block = nullptr;  // the block carved from now
    int64_t used = 0;    // elements of `block` handed out
    int64_t cap = 0;     // elements in `block`
    int64_t total = 0;   // elements over all blocks
    T* take(int64_t n);  // nullptr when `block` has no room for n (aligned) elements
    T* add_block(int64_t elems, bool zeroed, bool make_current);
  };

  // Persistent arena: blocks are never moved or reused, so alloc() views live as long as the
  // backend. A request above half a block gets a dedicated block, the shared one stays current.
  Arena persistent_;
  // Scratch arena: rewound by reset_scratch, which first merges its blocks into one.
  Arena scratch_;
};

}  // namespace flide
