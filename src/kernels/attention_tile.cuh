// What the tree-attention kernels share (attention.cu: the planner, the mma.sync kernel for every
// head dim; attention_wgmma.cu: the wgmma kernel for hd 256): the plan's layout, the launch
// parameters, the key-block cursor, and the per-row steps around the two products (the CTA's
// row table, the masked online softmax of one key block, the final store). Each kernel walks its
// key blocks its own way (the wgmma kernel keeps a P V in flight across blocks). attention.cu's
// header says how the work is split and why.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/bf16x8.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/mma_bf16.cuh"

namespace flide::kernels::attention_detail {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kM = 16 * kWarps;  // packed (row, head) query rows per CTA
constexpr int kN = 64;           // keys per staged K/V block (the mma.sync kernel's)

constexpr int kHeaderWords = 4;
constexpr int kTileWords = 4;
constexpr int kRowWords = 4;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kMaxInit = -1e30f;  // finite start of the running max

struct Params {
  const bf16* q;  // [R, heads_q * hd]
  const bf16* k;  // [T, heads_kv * hd]
  const bf16* v;  // [T, heads_kv * hd]
  bf16* out;      // [R, heads_q * hd]
  const int32_t* plan;
  const int32_t* path_begin;   // [N + 1]
  const int32_t* path_nodes;   // root first
  const int32_t* node_offset;  // [N]
  const int32_t* node_length;  // [N]
  int heads_q;
  int heads_kv;
  int group;     // heads_q / heads_kv
  int n_chunks;  // CTAs per (tile, kv head)
  float scale_log2;
  // With gate.data, the output is multiplied by sigmoid(gate) in the store.
  AttentionGate gate;
};

// A split's launch parameters (AttentionSplit; n_dense + n_own CTAs a (tile, kv head, chunk),
// innermost in the grid): each CTA's rows leave records of hd + 2 floats (O, max, sum) in
// partial, record (split, r, query head) at ((split * R + r) * heads_q + head) * (hd + 2). Apart
// from Params, so that the unsplit kernels' parameters stay as they were.
struct SplitParams {
  float* partial = nullptr;
  int R = 0;
  int n_dense = 0, n_own = 0;
};

using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::smem_u32;

// Walks a CTA's key blocks: the parent's path root first (dense), then every own node of the
// CTA's rows in increasing offset (causal), each range cut into blocks of the kernel's block size
// (kN, or the wgmma kernel's 80) from its start.
// All threads run it identically (CTA-uniform).
struct Cursor {
  int pos = 0, end = 0;             // rest of the current range [pos, end)
  int path_next = 0, path_end = 0;  // ancestors still to walk: path_nodes[next .. end)
  int own_lo = INT_MIN;             // offset of the own node being walked
  bool own = false;
};

// A cursor at the start of the walk: the path root..parent first (none for parent < 0).
__device__ __forceinline__ Cursor path_cursor(const Params& p, int parent) {
  Cursor c;
  if (parent >= 0) {
    c.path_next = p.path_begin[parent];
    c.path_end = p.path_begin[parent + 1];
  }
  return c;
}

// One staged block: keys [kb, ke), ke - kb <= the block size; own: a block of the rows' own nodes
// (masked causally), else of the dense ancestor part.
struct KeyBlock {
  int kb = 0, ke = 0;
  bool own = false;
};

// The walk's next block of at most kBlockN keys into `b`; false when the walk is done.
template <int kBlockN>
__device__ __forceinline__ bool next_block(Cursor& c, const Params& p, const int* s_lo,
                                           const int* s_hi, KeyBlock& b) {
  while (c.pos >= c.end) {
    if (!c.own && c.path_next < c.path_end) {
      const int a = p.path_nodes[c.path_next++];
      c.pos = p.node_offset[a];
      c.end = c.pos + p.node_length[a];
      continue;
    }
    c.own = true;
    // The next own node: the smallest row offset above the last one walked. Its range ends
    // after the CTA's last row in it; unused packed rows carry lo = INT_MAX.
    int lo = INT_MAX;
    for (int m = 0; m < kM; ++m) {
      const int x = s_lo[m];
      if (x > c.own_lo && x < lo) lo = x;
    }
    if (lo == INT_MAX) return false;
    int end = lo;
    for (int m = 0; m < kM; ++m)
      if (s_lo[m] == lo && s_hi[m] + 1 > end) end = s_hi[m] + 1;
    c.own_lo = lo;
    c.pos = lo;
    c.end = end;
  }
  b.kb = c.pos;
  b.ke = c.end - c.pos < kBlockN ? c.end : c.pos + kBlockN;
  b.own = c.own;
  c.pos = b.ke;
  return true;
}

// The CTA's rows: threads < kM fill the table of its packed rows, kM entries each: q / out row
// (-1: unused), stream row, offset of the row's node (INT_MAX: unused), query head (16 bits, so
// that the hd-256 kernel's 80-key stages fit beside it; tree_attention refuses heads_q >= 2^15).
struct RowTable {
  static constexpr size_t kBytes = 3 * kM * sizeof(int) + kM * sizeof(int16_t);
  int* r;
  int* hi;
  int* lo;
  int16_t* qh;
  // The table's four columns, kM entries each, from `table` (kBytes of shared memory).
  static __device__ RowTable carve(int* table) {
    return {table, table + kM, table + 2 * kM, reinterpret_cast<int16_t*>(table + 3 * kM)};
  }
};

// Decodes the CTA's (tile, kv head, chunk of packed rows, split) and fills `rows`; false (for the
// whole CTA) when the CTA has nothing to do. The caller synchronises before reading the table.
// n_splits: the grid's splits a (tile, kv head, chunk), innermost (1: none; split is then 0).
__device__ __forceinline__ bool load_row_table(const Params& p, const RowTable& rows, int& kvh,
                                               int& parent, int& split, int n_splits = 1) {
  int b = int(blockIdx.x);
  split = b % n_splits;
  b /= n_splits;
  const int chunk = b % p.n_chunks;
  b /= p.n_chunks;
  kvh = b % p.heads_kv;
  const int tile = b / p.heads_kv;
  if (tile >= p.plan[1]) return false;  // the caller may launch for an upper bound of tiles
  const int32_t* td = p.plan + kHeaderWords + int64_t(tile) * kTileWords;
  const int row_begin = td[0], n_rows = td[1];
  parent = td[2];
  const int n_packed = n_rows * p.group;
  const int m0 = chunk * kM;
  if (m0 >= n_packed) return false;
  const int32_t* plan_rows = p.plan + p.plan[3];
  const int tid = int(threadIdx.x);
  static_assert(kThreads >= kM, "one thread per packed row");
  if (tid < kM) {
    const int pr = m0 + tid;
    if (pr < n_packed) {
      const int32_t* rd = plan_rows + int64_t(row_begin + pr / p.group) * kRowWords;
      rows.r[tid] = rd[0];
      rows.hi[tid] = rd[1];
      rows.lo[tid] = rd[2];
      rows.qh[tid] = int16_t(kvh * p.group + pr % p.group);
    } else {
      rows.r[tid] = -1;
      rows.hi[tid] = -1;
      rows.lo[tid] = INT_MAX;
      rows.qh[tid] = 0;
    }
  }
  return true;
}

// The CTA's packed Q rows [kM][HD] into shared memory, 16 bytes at a time: element c..c + 7 of
// row m to dst(m, c); unused rows are zeros.
template <int HD, class Dst>
__device__ __forceinline__ void load_q_rows(const Params& p, const RowTable& rows, int tid,
                                            Dst dst) {
  constexpr int kUnits = HD / 8;  // 16-byte units of a row
  const int64_t q_stride = int64_t(p.heads_q) * HD;
  for (int idx = tid; idx < kM * kUnits; idx += kThreads) {
    const int m = idx / kUnits, c = (idx % kUnits) * 8;
    const int r = rows.r[m];
    const bf16* src = r >= 0 ? p.q + int64_t(r) * q_stride + int64_t(rows.qh[m]) * HD + c : p.q;
    cp_async16(dst(m, c), src, r >= 0 ? 16 : 0);
  }
}

// Keys [b.kb, b.ke) of kv head kvh into a stage: element c..c + 7 of K row `row` to
// dst(row, c), of V row `row` v_bytes further; rows past ke are zeros, so P (0 there) times V
// stays finite.
template <int HD, class Dst>
__device__ __forceinline__ void load_kv_rows(const Params& p, int kvh, const KeyBlock& b, int tid,
                                             Dst dst, uint32_t v_bytes) {
  constexpr int kUnits = HD / 8;
  for (int idx = tid; idx < kN * kUnits; idx += kThreads) {
    const int row = idx / kUnits, c = (idx % kUnits) * 8;
    const int j = b.kb + row;
    const bool ok = j < b.ke;
    const int64_t off = int64_t(ok ? j : b.kb) * p.heads_kv * HD + kvh * HD + c;
    const uint32_t to = dst(row, c);
    cp_async16(to, p.k + off, ok ? 16 : 0);
    cp_async16(to + v_bytes, p.v + off, ok ? 16 : 0);
  }
}

// The blocks of the walk that are a split CTA's (AttentionSplit): a dense CTA's share
// [d_begin, d_end) of the dense blocks, or an own CTA's own nodes own_slot, own_slot + n_own, ...
struct SplitWalk {
  bool dense = false;
  int d_begin = 0, d_end = 0;
  int own_slot = 0, n_own = 1;
  int dense_seen = 0, own_node = -1, own_lo = INT_MIN;
};

// CTA `split`'s SplitWalk for a walk in blocks of kBlockN keys (the dense blocks counted over the
// path root..parent, range by range, as next_block cuts them).
template <int kBlockN>
__device__ __forceinline__ SplitWalk split_walk(const Params& p, const SplitParams& sp, int parent,
                                                int split) {
  SplitWalk w;
  w.dense = split < sp.n_dense;
  if (w.dense) {
    int blocks = 0;
    if (parent >= 0)
      for (int i = p.path_begin[parent]; i < p.path_begin[parent + 1]; ++i)
        blocks += (p.node_length[p.path_nodes[i]] + kBlockN - 1) / kBlockN;
    w.d_begin = int(int64_t(split) * blocks / sp.n_dense);
    w.d_end = int(int64_t(split + 1) * blocks / sp.n_dense);
  } else {
    w.own_slot = split - sp.n_dense;
    w.n_own = sp.n_own;
  }
  return w;
}

// next_block over a split CTA's blocks only (SplitWalk).
template <int kBlockN>
__device__ __forceinline__ bool next_split_block(Cursor& c, const Params& p, const int* s_lo,
                                                 const int* s_hi, SplitWalk& w, KeyBlock& b) {
  while (next_block<kBlockN>(c, p, s_lo, s_hi, b)) {
    if (w.dense) {  // the dense blocks come first: past the share, nothing is left
      if (b.own) return false;
      const int d = w.dense_seen++;
      if (d >= w.d_end) return false;
      if (d >= w.d_begin) return true;
    } else if (b.own) {
      if (c.own_lo != w.own_lo) w.own_lo = c.own_lo, ++w.own_node;
      if (w.own_node % w.n_own == w.own_slot) return true;
    }
  }
  return false;
}

// A thread's two fragment rows (row0 = 16 warp + lane / 4, row1 = row0 + 8) and their online
// softmax state.
struct RowPair {
  int row0, row1;
  int lo0, hi0, lo1, hi1;              // own node offset and stream row of each
  float m0 = kMaxInit, m1 = kMaxInit;  // running max (log2 units)
  float l0 = 0.f, l1 = 0.f;            // this thread's share of the running sum

  __device__ RowPair(const RowTable& rows, int warp, int lane)
      : row0(warp * 16 + (lane >> 2)),
        row1(row0 + 8),
        lo0(rows.lo[row0]),
        hi0(rows.hi[row0]),
        lo1(rows.lo[row1]),
        hi1(rows.hi[row1]) {}
};

// Turns one key block's scores S (a warp's 16 rows x kNT n-tiles of 8 keys as m16n8 accumulators:
// element e of n-tile nt is key kb + 8 nt + 2 t + (e & 1), row0 for e < 2, else row1) into P in
// place: scaled to log2 units, masked (keys past ke; in an own block, keys outside [lo, stream row]
// of the row), exponentiated against the updated running max. Updates the rows' max and sum and
// returns the factors (x: row0, y: row1) by which their O must be rescaled (exactly 1 when the max
// did not move).
template <int kNT>
__device__ __forceinline__ float2 softmax_block(float (&s)[kNT][4], RowPair& rp, const KeyBlock& b,
                                                float scale_log2, int quad_t) {
  const int kb = b.kb, ke = b.ke;
  const bool own = b.own;
  if (!own && ke - kb == 8 * kNT) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= scale_log2;
  } else {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = kb + nt * 8 + 2 * quad_t + (e & 1);
        const int lo = own ? (e < 2 ? rp.lo0 : rp.lo1) : INT_MIN;
        const int hi = own ? (e < 2 ? rp.hi0 : rp.hi1) : INT_MAX;
        const bool visible = j < ke && j >= lo && j <= hi;
        s[nt][e] = visible ? s[nt][e] * scale_log2 : -INFINITY;
      }
    }
  }
  // A row's four threads (one quad) hold its 8 kNT scores.
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
    mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
  }
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
  }
  const float mn0 = fmaxf(rp.m0, mx0), mn1 = fmaxf(rp.m1, mx1);  // finite
  const float alpha0 = mn0 == rp.m0 ? 1.f : exp2f(rp.m0 - mn0);
  const float alpha1 = mn1 == rp.m1 ? 1.f : exp2f(rp.m1 - mn1);
  rp.m0 = mn0;
  rp.m1 = mn1;
  float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    s[nt][0] = exp2f(s[nt][0] - mn0);
    s[nt][1] = exp2f(s[nt][1] - mn0);
    s[nt][2] = exp2f(s[nt][2] - mn1);
    s[nt][3] = exp2f(s[nt][3] - mn1);
    sum0 += s[nt][0] + s[nt][1];
    sum1 += s[nt][2] + s[nt][3];
  }
  rp.l0 = rp.l0 * alpha0 + sum0;
  rp.l1 = rp.l1 * alpha1 + sum1;
  return make_float2(alpha0, alpha1);
}

// O *= alpha per row, skipped when no row of the warp moved its max.
template <int kDimTiles>
__device__ __forceinline__ void rescale(float (&o)[kDimTiles][4], float2 alpha) {
  if (__any_sync(0xffffffffu, alpha.x != 1.f || alpha.y != 1.f)) {
#pragma unroll
    for (int dn = 0; dn < kDimTiles; ++dn) {
      o[dn][0] *= alpha.x;
      o[dn][1] *= alpha.x;
      o[dn][2] *= alpha.y;
      o[dn][3] *= alpha.y;
    }
  }
}

// The A fragment (m16n8k16, bf16) of P's k-step ks: the C fragments of n-tiles 2 ks, 2 ks + 1.
template <int kNT>
__device__ __forceinline__ void p_fragment(uint32_t (&a)[4], const float (&s)[kNT][4], int ks) {
  detail::acc_pair_as_a(a, s[2 * ks], s[2 * ks + 1]);
}

// The rows' sums over their quad (each thread holds a share of its rows' keys).
__device__ __forceinline__ void quad_sums(RowPair& rp) {
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    rp.l0 += __shfl_xor_sync(0xffffffffu, rp.l0, off);
    rp.l1 += __shfl_xor_sync(0xffffffffu, rp.l1, off);
  }
}

// Two output values o * inv rounded to bf16 once; with a gate pair g (nullptr: none), that value
// times sigmoid(g) rounded once more, as sigmoid_mul would make it. The unsplit store and the
// split's merge both end here, so that they round alike.
__device__ __forceinline__ __nv_bfloat162 out_pair(float o0, float o1, float inv,
                                                   const __nv_bfloat162* g) {
  const __nv_bfloat162 y = __floats2bfloat162_rn(o0 * inv, o1 * inv);
  if (!g) return y;
  const float2 yf = __bfloat1622float2(y), gf = __bfloat1622float2(*g);
  return __floats2bfloat162_rn(detail::times_sigmoid(yf.x, gf.x),
                               detail::times_sigmoid(yf.y, gf.y));
}

// out = O / l for the thread's two rows (columns 8 dn + 2 t, + 1 of each n-tile below HD), rounded
// to bf16 once; unused packed rows are not stored. With a gate, that bf16 value times sigmoid(gate)
// is stored instead, rounded once more, as sigmoid_mul would make it.
template <int HD, int kDimTiles>
__device__ __forceinline__ void store_rows(const float (&o)[kDimTiles][4], RowPair rp,
                                           const RowTable& rows, const Params& p, int quad_t) {
  quad_sums(rp);
  const int64_t q_stride = int64_t(p.heads_q) * HD;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = h ? rp.row1 : rp.row0, r = rows.r[row];
    if (r < 0) continue;
    const float l = h ? rp.l1 : rp.l0, inv = l > 0.f ? 1.f / l : 0.f;
    bf16* dst = p.out + int64_t(r) * q_stride + int64_t(rows.qh[row]) * HD + 2 * quad_t;
    // With a gate, every gate pair is loaded before the first store: the compiler cannot tell
    // that out and the gate do not overlap, and would keep each load behind the store before it.
    __nv_bfloat162 g[kDimTiles];
    if (p.gate.data) {
      const bf16* gate = p.gate.data + int64_t(r) * p.gate.row_stride +
                         int64_t(rows.qh[row]) * p.gate.head_stride + 2 * quad_t;
#pragma unroll
      for (int dn = 0; dn < kDimTiles; ++dn)
        if (dn * 8 < HD) g[dn] = *reinterpret_cast<const __nv_bfloat162*>(gate + dn * 8);
    }
#pragma unroll
    for (int dn = 0; dn < kDimTiles; ++dn)
      if (dn * 8 < HD)
        *reinterpret_cast<__nv_bfloat162*>(dst + dn * 8) =
            out_pair(o[dn][2 * h], o[dn][2 * h + 1], inv, p.gate.data ? &g[dn] : nullptr);
  }
}

// A split CTA's rows (SplitParams::partial): O unnormalized (columns 8 dn + 2 t, + 1 of each
// n-tile below HD), the running max and the sum (its quad's shares added) into the row's record.
template <int HD, int kDimTiles>
__device__ __forceinline__ void store_partial(const float (&o)[kDimTiles][4], RowPair rp,
                                              const RowTable& rows, const Params& p,
                                              const SplitParams& sp, int quad_t, int split) {
  quad_sums(rp);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = h ? rp.row1 : rp.row0, r = rows.r[row];
    if (r < 0) continue;
    float* rec = sp.partial + ((int64_t(split) * sp.R + r) * p.heads_q + rows.qh[row]) * (HD + 2);
#pragma unroll
    for (int dn = 0; dn < kDimTiles; ++dn)
      if (dn * 8 < HD)
        *reinterpret_cast<float2*>(rec + dn * 8 + 2 * quad_t) =
            make_float2(o[dn][2 * h], o[dn][2 * h + 1]);
    if (quad_t == 0) {
      rec[HD] = h ? rp.m1 : rp.m0;
      rec[HD + 1] = h ? rp.l1 : rp.l0;
    }
  }
}

// The hd 256 kernel (attention_wgmma.cu), on the same plan and grid as the mma.sync one.
// K and V are [n_tokens, heads_kv * 256].
// With sp.n_dense + sp.n_own > 0, the keys split over CTAs (SplitParams).
cudaError_t launch_wgmma_hd256(const Params& p, const SplitParams& sp, int64_t n_tokens,
                               unsigned grid, cudaStream_t stream);
// The merge of a split's records into out (attention_combine.cu): Params' out, gate and heads_q.
cudaError_t launch_combine(const Params& p, const SplitParams& sp, int head_dim,
                           cudaStream_t stream);

}  // namespace flide::kernels::attention_detail
