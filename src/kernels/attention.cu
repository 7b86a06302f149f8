// ForkAttention (attention.h): the host planner and the tensor-core kernel.
//
// Work split. The planner groups query rows by the set of their ancestors: rows whose node has
// parent p form one group (all questions of a trunk, all continuations of a question, in any
// order of r), and the rows of a root node form a group of their own. A group is cut into tiles
// of at most kTileRows rows, sorted by stream row. Every row of a tile sees the same ancestor
// K/V, so the tile reads it once as one dense block (no mask: ancestors precede in position),
// then walks each own node of its rows causally: key j is visible to row i of node n iff
// offset(n) <= j <= stream_row(i). Both parts run through one online softmax, so "merging by
// log-sum-exp" is the running-max rescale itself; no partial results leave the CTA.
//
// CTA mapping (GQA packing). One CTA of kWarps warps serves kM = 16 * kWarps packed query rows
// of one tile and one kv head: packed row m0 + m (chunk * kM + m) is tile row (m0 + m) / group,
// query head kvh * group + (m0 + m) % group, group = heads_q / heads_kv. A tile of 64 rows with
// group 4 is 256 packed rows, two CTAs. Query heads that share a kv head read each staged K/V
// block once, and a tile with few rows (the last layer: one row per question) still fills the
// MMA rows with its group's heads. kM = 128 halves L2->smem traffic against kM = 64: at hd 256
// a 64-row CTA would need ~7 TB/s of L2 at full mma rate. Grid: n_tiles * heads_kv * n_chunks,
// tile outermost, so the CTAs of a tile (which read the same K/V) run together, and the planner
// orders tiles by estimated work, heaviest first (longest-processing-time first).
//
// Per CTA: Q [kM, hd] stays in shared memory; K and V blocks of kN = 64 keys are staged by
// cp.async (zero-filled past a range's end) in two stages: block b + 1 (K and V) loads while
// block b computes S = Q K^T, the softmax and O += P V, with two barriers per block. Each
// warp owns 16 packed rows; S and O live in mma.sync m16n8k16 (bf16 in, fp32 accumulate)
// fragments, operands come from shared memory by ldmatrix (.trans for V). Shared rows are
// padded by 16 bytes, so ldmatrix's 8 row addresses hit 8 distinct bank quads. Head dims that
// are not a multiple of 16 (24) are zero-padded in shared memory to the next one.
// hd 128: 1 CTA/SM (by registers); hd <= 64: 2 CTAs/SM. hd 256 (every Qwen3.5 size) runs its
// two products on wgmma instead, its K/V stages copied by TMA and handed on by mbarriers
// (attention_wgmma.cu); attention_tile.cuh holds what the two kernels share.
//
// Numerics: scores s * scale * log2(e) in fp32, exp2; the running max starts at a finite
// sentinel (-1e30) and masked scores are -inf, so exp2(masked - max) is exactly 0, the rescale
// factor exp2(m_old - m_new) never sees inf - inf, and no row can produce NaN (every real row
// sees itself; unused packed rows are never stored). O is divided by the fp32 row sum at the end
// and rounded to bf16 once. P is rounded to bf16 for the PV product (the row sum stays fp32).
//
// Reduction order (batch invariance). A row visits the key ranges of its path in a fixed order:
// each ancestor span root first, then its own node, each cut into 64-key blocks starting at the
// span's first row. Blocks of other rows' nodes that its CTA also walks are fully masked for it,
// and a fully masked block leaves its state unchanged (max unchanged, p = 0 exactly). So a row's
// bits depend only on its own path's K/V and span lengths: not on the tiling, on the other rows
// of its tile, on other requests, or on stream offsets (up to fp32 denormals flushed by a x1
// rescale, --use_fast_math). They do depend on kN, kWarps and the head-dim instantiation.
//
// Split keys (AttentionSplit; hd 256 only, for the out rows: the last layer's one row a
// question). A tile's keys otherwise sit on one CTA a (tile, kv head): a QuALITY round of 4 ran
// its 72 read rows' 5,000-key trunks and 18 own nodes each on 8 CTAs, 271 us with the query pass
// (120 us split; bench/results/2026-12-02-readout-split-narrow-gates.md). Split, each of
// dense + own CTAs walks a fixed share (the dense blocks in contiguous ranges, the own nodes
// round-robin) and attention_combine.cu merges the shares in split order. A row's bits then
// depend on its own path and the fixed counts only, as above: a fully masked block leaves a
// share's state as it was, and a share with none of a row's keys adds exactly nothing.
//
// Plan blob (int32 words, host-built, copied to the device verbatim):
//   header [kHeaderWords]:  magic, n_tiles, n_rows (R), rows_word (word offset of the rows)
//   tiles  [n_tiles][kTileWords]: row_begin (index into rows), n_rows (1..kTileRows),
//                                 parent (node whose path root..parent is the dense part; -1:
//                                 none), cost (planner's work estimate in keys; unused on device)
//   rows   [R][kRowWords]:     r (row of q / out), stream row, offset of the row's node, node
// A tile's rows are rows[row_begin .. row_begin + n_rows), sorted by stream row. Ancestor spans
// come from meta.path_begin / path_nodes / node_offset / node_length of the parent, so the plan
// stays O(R + n_nodes); q_rows is not read on the device (the plan holds the stream rows).
#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_tile.cuh"
#include "kernels/launch.cuh"

namespace flide::kernels {
namespace {

using namespace attention_detail;

constexpr int kTileRows = 64;               // query rows per planner tile
constexpr int32_t kPlanMagic = 0x46415431;  // "FAT1"

template <int HD>
struct Shape {
  static constexpr int kPadded = (HD + 15) / 16 * 16;   // MMA k / n extent
  static constexpr int kStride = kPadded + 8;           // smem row, elements (+16 bytes)
  static constexpr int kStageElems = 2 * kN * kStride;  // one stage: K then V
  static constexpr size_t kSmemBytes =
      (size_t(kM) * kStride + 2 * size_t(kStageElems)) * sizeof(bf16) + RowTable::kBytes;
  static_assert(HD % 8 == 0, "rows are moved in 16-byte chunks");
};

using detail::ldsm_x4;
using detail::ldsm_x4_trans;
using detail::mma_bf16;

// The walk over two K/V stages: block b computes from stage b & 1 while block b + 1 loads into
// the other. load(stage, block) issues a stage's copies (the first joins the Q copies already
// issued, in one commit group); compute(stage, block) runs the block's two products.
template <class Load, class Compute>
__device__ __forceinline__ void walk_key_blocks(const Params& p, int parent, const int* s_lo,
                                                const int* s_hi, Load load, Compute compute) {
  Cursor cur = path_cursor(p, parent);
  KeyBlock blk;
  bool have = next_block<kN>(cur, p, s_lo, s_hi, blk);
  if (have) load(0, blk);
  cp_async_commit();  // Q and stage 0
  for (int stage = 0; have; stage ^= 1) {
    __syncthreads();  // every warp is done with the other stage (block b - 1)
    KeyBlock next;
    const bool have_next = next_block<kN>(cur, p, s_lo, s_hi, next);
    if (have_next) load(stage ^ 1, next);
    cp_async_commit();  // possibly empty, so "all but the newest" below is block b's group
    cp_async_wait<1>();
    __syncthreads();  // block b's K and V (and Q) have landed for every thread
    compute(stage, blk);
    blk = next;
    have = have_next;
  }
}

template <int HD, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) tree_attention_kernel(const Params p) {
  using S = Shape<HD>;
  constexpr int kDimTiles = S::kPadded / 8;  // n-tiles of O
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);  // [kM][kStride]
  bf16* sKV = sQ + kM * S::kStride;          // [2 stages][K, V][kN][kStride]
  int* table = reinterpret_cast<int*>(sKV + 2 * S::kStageElems);
  const RowTable rows = RowTable::carve(table);

  int kvh = 0, parent = -1, split = 0;  // no split here: tree_attention allows it for hd 256 only
  if (!load_row_table(p, rows, kvh, parent, split)) return;
  const int tid = int(threadIdx.x);
  if constexpr (S::kPadded != HD) {  // zero the padded columns of Q and both K/V stages once
    constexpr int kPadCols = S::kPadded - HD;
    for (int idx = tid; idx < (kM + 4 * kN) * kPadCols; idx += kThreads)
      sQ[(idx / kPadCols) * S::kStride + HD + idx % kPadCols] = __float2bfloat16_rn(0.f);
  }
  __syncthreads();

  load_q_rows<HD>(p, rows, tid, [&](int m, int c) { return smem_u32(sQ + m * S::kStride + c); });
  const int warp = tid / 32, lane = tid % 32;
  const int quad_t = lane & 3;
  RowPair rp(rows, warp, lane);
  // ldmatrix row addresses: A (Q) rows lane & 15, k-half lane >> 4; B (K) key
  // (lane >> 4) * 8 + (lane & 7), k-half (lane >> 3) & 1; B (V, transposed) key lane & 15,
  // dim-half lane >> 4.
  const uint32_t q_addr = smem_u32(sQ + (warp * 16 + (lane & 15)) * S::kStride + (lane >> 4) * 8);
  const uint32_t k_addr0 =
      smem_u32(sKV + ((lane >> 4) * 8 + (lane & 7)) * S::kStride + ((lane >> 3) & 1) * 8);
  const uint32_t v_addr0 = smem_u32(sKV + (kN + (lane & 15)) * S::kStride + (lane >> 4) * 8);
  constexpr uint32_t kStageBytes = S::kStageElems * sizeof(bf16);

  float o[kDimTiles][4];
#pragma unroll
  for (int dn = 0; dn < kDimTiles; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.f;

  // A stage is [K, V][kN][kStride].
  auto load_stage = [&](int stage, const KeyBlock& b) {
    bf16* at = sKV + stage * S::kStageElems;
    load_kv_rows<HD>(
        p, kvh, b, tid, [&](int row, int c) { return smem_u32(at + row * S::kStride + c); },
        kN * S::kStride * sizeof(bf16));
  };
  auto products = [&](int stage, const KeyBlock& blk) {
    const uint32_t k_addr = k_addr0 + stage * kStageBytes;
    const uint32_t v_addr = v_addr0 + stage * kStageBytes;

    // S = Q K^T, 16 rows x 64 keys per warp
    float s[kN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < S::kPadded / 16; ++ks) {
      uint32_t a[4];
      ldsm_x4(a, q_addr + ks * 16 * int(sizeof(bf16)));
#pragma unroll
      for (int np = 0; np < kN / 16; ++np) {
        uint32_t bk[4];
        ldsm_x4(bk, k_addr + (np * 16 * S::kStride + ks * 16) * int(sizeof(bf16)));
        mma_bf16(s[2 * np], a, bk[0], bk[1]);
        mma_bf16(s[2 * np + 1], a, bk[2], bk[3]);
      }
    }
    rescale(o, softmax_block(s, rp, blk, p.scale_log2, quad_t));

    // O += P V
#pragma unroll
    for (int ks = 0; ks < kN / 16; ++ks) {
      uint32_t a[4];
      p_fragment(a, s, ks);
#pragma unroll
      for (int dp = 0; dp < S::kPadded / 16; ++dp) {
        uint32_t bv[4];
        ldsm_x4_trans(bv, v_addr + (ks * 16 * S::kStride + dp * 16) * int(sizeof(bf16)));
        mma_bf16(o[2 * dp], a, bv[0], bv[1]);
        mma_bf16(o[2 * dp + 1], a, bv[2], bv[3]);
      }
    }
  };
  walk_key_blocks(p, parent, rows.lo, rows.hi, load_stage, products);
  store_rows<HD>(o, rp, rows, p, quad_t);
}

template <int HD>
cudaError_t launch(const Params& p, unsigned grid, cudaStream_t stream) {
  // hd >= 128 needs more than 128 registers a thread (O alone is hd / 2 floats): 1 CTA/SM.
  constexpr int kMinBlocks = HD >= 128 ? 1 : 2;
  constexpr size_t smem = Shape<HD>::kSmemBytes;
  constexpr auto kernel = tree_attention_kernel<HD, kMinBlocks>;
  const cudaError_t attr = detail::raise_smem_limit<kernel, int(smem)>();
  if (attr != cudaSuccess) return attr;
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

int64_t attention_split_floats(int64_t R, int heads_q, int head_dim, const AttentionSplit& split) {
  return int64_t(split.dense + split.own) * std::max<int64_t>(R, 0) * heads_q * (head_dim + 2);
}

int64_t attention_max_tiles(int64_t R, int32_t n_nodes) {
  // Tiles per group <= rows / kTileRows + 1, and groups <= n_nodes (a root's own group maps to
  // the root, a children's group to one of its children).
  return (std::max<int64_t>(R, 0) + kTileRows - 1) / kTileRows + std::max<int32_t>(n_nodes, 0);
}

size_t attention_plan_bytes(int64_t R, int32_t n_nodes) {
  const int64_t rows = std::max<int64_t>(R, 0);
  return sizeof(int32_t) *
         size_t(kHeaderWords + kTileWords * attention_max_tiles(R, n_nodes) + kRowWords * rows);
}

size_t build_attention_plan(const HostTree& tree, const int32_t* q_rows, int64_t R, void* plan,
                            int32_t* n_tiles) {
  if (n_tiles) *n_tiles = 0;
  const int32_t N = tree.n_nodes, T = tree.n_tokens;
  if (!plan || !n_tiles || R < 0 || R > INT32_MAX / 2 || N < 0 || T < 0) return 0;

  // Keys on the path root..n of every node (the dense part of a tile whose parent is n).
  std::vector<int64_t> path_keys(static_cast<size_t>(N), -1);
  std::vector<int32_t> chain;
  for (int32_t n0 = 0; n0 < N; ++n0) {
    chain.clear();
    int32_t n = n0;
    while (n >= 0 && path_keys[size_t(n)] < 0) {
      if (int64_t(chain.size()) >= N) return 0;  // a cycle
      chain.push_back(n);
      n = tree.node_parent[n];
      if (n < -1 || n >= N) return 0;
    }
    int64_t keys = n >= 0 ? path_keys[size_t(n)] : 0;
    for (size_t i = chain.size(); i-- > 0;) {
      keys += tree.node_length[chain[i]];
      path_keys[size_t(chain[i])] = keys;
    }
  }

  struct Entry {
    int64_t group;  // parent node, or N + node for a root's own rows
    int32_t row;    // stream row
    int32_t r;      // q / out row
    int32_t lo;     // offset of the row's node
    int32_t node;
  };
  // Sorted by (group, row, r): a stable counting sort by group keeps r order within a group,
  // where rows already ascend unless q_rows lists them out of order (then that group is sorted).
  // Two passes (count, place) over the rows instead of a comparison sort and a second array: a
  // 50,000-row round plans ~8x faster (3.4 -> 0.45 ms on a development machine).
  const auto entry = [&](int64_t r, Entry& e) {
    const int32_t row = q_rows ? q_rows[r] : int32_t(r);
    if (row < 0 || row >= T) return false;
    const int32_t node = tree.token_node[row];
    if (node < 0 || node >= N) return false;
    const int32_t lo = tree.node_offset[node];
    if (row < lo || row >= lo + tree.node_length[node]) return false;
    const int32_t parent = tree.node_parent[node];
    e = {parent >= 0 ? int64_t(parent) : int64_t(N) + node, row, int32_t(r), lo, node};
    return true;
  };
  std::vector<int64_t> group_begin(2 * size_t(N) + 1, 0);  // groups are < 2N
  for (int64_t r = 0; r < R; ++r) {
    Entry e;
    if (!entry(r, e)) return 0;
    ++group_begin[size_t(e.group) + 1];
  }
  for (size_t g = 1; g < group_begin.size(); ++g) group_begin[g] += group_begin[g - 1];
  std::vector<Entry> entries(static_cast<size_t>(R));
  {
    std::vector<int64_t> next(group_begin.begin(), group_begin.end() - 1);
    for (int64_t r = 0; r < R; ++r) {
      Entry e;
      entry(r, e);
      entries[size_t(next[size_t(e.group)]++)] = e;
    }
  }
  const auto by_row = [](const Entry& a, const Entry& b) {
    return a.row != b.row ? a.row < b.row : a.r < b.r;
  };
  for (size_t g = 0; g + 1 < group_begin.size(); ++g) {
    const auto first = entries.begin() + group_begin[g],
               last = entries.begin() + group_begin[g + 1];
    if (!std::is_sorted(first, last, by_row)) std::sort(first, last, by_row);
  }

  struct Tile {
    int32_t row_begin, n_rows, parent;
    int64_t cost;
  };
  std::vector<Tile> tiles;
  for (int64_t gb = 0; gb < R;) {
    int64_t ge = gb;
    while (ge < R && entries[size_t(ge)].group == entries[size_t(gb)].group) ++ge;
    const int64_t n = ge - gb;
    const int64_t nt = (n + kTileRows - 1) / kTileRows;  // balanced sizes, each <= kTileRows
    const int64_t group = entries[size_t(gb)].group;
    const int32_t parent = group < N ? int32_t(group) : -1;
    int64_t begin = gb;
    for (int64_t i = 0; i < nt; ++i) {
      const int64_t size = n / nt + (i < n % nt ? 1 : 0);
      // Work estimate in keys: the dense part plus each own node up to its last row here.
      int64_t cost = parent >= 0 ? path_keys[size_t(parent)] : 0;
      for (int64_t e = begin; e < begin + size; ++e) {
        const Entry& x = entries[size_t(e)];
        if (e + 1 == begin + size || entries[size_t(e + 1)].node != x.node)
          cost += x.row - x.lo + 1;
      }
      tiles.push_back({int32_t(begin), int32_t(size), parent, cost});
      begin += size;
    }
    gb = ge;
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const Tile& a, const Tile& b) { return a.cost > b.cost; });

  int32_t* w = static_cast<int32_t*>(plan);
  const int64_t rows_word = kHeaderWords + kTileWords * int64_t(tiles.size());
  w[0] = kPlanMagic;
  w[1] = int32_t(tiles.size());
  w[2] = int32_t(R);
  w[3] = int32_t(rows_word);
  for (size_t i = 0; i < tiles.size(); ++i) {
    int32_t* t = w + kHeaderWords + kTileWords * int64_t(i);
    t[0] = tiles[i].row_begin;
    t[1] = tiles[i].n_rows;
    t[2] = tiles[i].parent;
    t[3] = int32_t(std::min<int64_t>(tiles[i].cost, INT32_MAX));
  }
  for (int64_t i = 0; i < R; ++i) {
    int32_t* x = w + rows_word + kRowWords * i;
    const Entry& e = entries[size_t(i)];
    x[0] = e.r;
    x[1] = e.row;
    x[2] = e.lo;
    x[3] = e.node;
  }
  *n_tiles = int32_t(tiles.size());
  return sizeof(int32_t) * size_t(rows_word + kRowWords * R);
}

cudaError_t tree_attention(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                           __nv_bfloat16* out, const int32_t* q_rows, int64_t R,
                           const TreeMeta& meta, const void* plan, int32_t n_tiles, int heads_q,
                           int heads_kv, int head_dim, float scale, cudaStream_t stream,
                           const AttentionGate& gate, const AttentionSplit& split) {
  (void)q_rows;  // the plan carries each row's stream row
  if (R == 0) return cudaSuccess;
  if (R < 0 || n_tiles <= 0 || heads_kv <= 0 || heads_q <= 0 || heads_q % heads_kv != 0 ||
      heads_q > INT16_MAX)  // RowTable's 16-bit query heads
    return cudaErrorInvalidValue;
  if (reinterpret_cast<uintptr_t>(gate.data) % 4 != 0 || gate.row_stride % 2 != 0 ||
      gate.head_stride % 2 != 0)
    return cudaErrorMisalignedAddress;
  if (!q || !k || !v || !out || !plan || !meta.path_begin || !meta.path_nodes ||
      !meta.node_offset || !meta.node_length)
    return cudaErrorInvalidValue;
  // cp.async moves 16-byte chunks; rows are multiples of 16 bytes for every supported hd.
  if ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
       reinterpret_cast<uintptr_t>(v) | reinterpret_cast<uintptr_t>(out)) %
          16 !=
      0)
    return cudaErrorMisalignedAddress;
  const bool splits = split.dense != 0 || split.own != 0;
  if (splits &&
      (head_dim != 256 || split.dense < 1 || split.own < 1 || !split.partial || R > INT32_MAX))
    return cudaErrorInvalidValue;
  const int group = heads_q / heads_kv;
  const int n_chunks = (kTileRows * group + kM - 1) / kM;
  const int64_t grid =
      int64_t(n_tiles) * heads_kv * n_chunks * (splits ? split.dense + split.own : 1);
  if (grid > INT32_MAX) return cudaErrorInvalidValue;
  Params p{q,
           k,
           v,
           out,
           static_cast<const int32_t*>(plan),
           meta.path_begin,
           meta.path_nodes,
           meta.node_offset,
           meta.node_length,
           heads_q,
           heads_kv,
           group,
           n_chunks,
           scale * kLog2e,
           gate};
  const SplitParams sp{split.partial, int(R), split.dense, split.own};
  const unsigned g = unsigned(grid);
  switch (head_dim) {
    case 16:
      return launch<16>(p, g, stream);
    case 24:
      return launch<24>(p, g, stream);
    case 32:
      return launch<32>(p, g, stream);
    case 64:
      return launch<64>(p, g, stream);
    case 128:
      return launch<128>(p, g, stream);
    case 256: {
      const cudaError_t err = launch_wgmma_hd256(p, sp, meta.n_tokens, g, stream);
      return err == cudaSuccess && splits ? launch_combine(p, sp, head_dim, stream) : err;
    }
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace flide::kernels
