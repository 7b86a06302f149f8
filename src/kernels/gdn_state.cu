// The chunked delta rule's sequential half and its output (gdn.h) for the small head dims of test
// checkpoints (Dk, Dv in {8, 12, 16, 24}); Dk = Dv = 128, every real model, runs on warpgroup MMA
// (gdn_state_wgmma.cu), whose products and rounding are these. One block per (node, value
// head, share of its value columns) walks the node's chunks in order with the state in registers,
// transposed: each warp owns a slab of 16 rows of S^T (value columns of S) against every key, as
// mma.sync accumulators. Per chunk, from the state entering it (b_j = beta_j exp(gamma_j)):
//   Y^T     = beta V^T - (S^T K^T) diag(b)
//   v_new^T = Y^T T^T                                          (fla's U - W S, in T's factors)
//   out^T   = Dk^-1/2 exp(gamma) (S^T q^T) + v_new^T P^T      (to bf16 out)
//   S^T     = exp(gamma_last) S^T + (v_new f)^T K,  f_j = exp(gamma_last - gamma_j).
// Applying T here instead of reading W = T (b K) and U = T (beta V) from the prepare kernel
// moves 64 instead of 2 (Dk + Dv) values per chunk row, and this kernel is bound by what it
// reads; the extra product (Y^T T^T, triangular) is a fifth of the chunk's tensor-core work.
// Why transposed: the state is then the A operand of both products with S, and Y^T and v_new^T
// the A operands of the others, and an accumulator tile is an A fragment as it stands: two n8
// tiles side by side are an m16n8k16 bf16 A (pairs 2t, 2t+1). So neither the state nor v_new
// ever goes through shared or global memory, the warps share nothing but the staged inputs (two
// barriers per chunk: the stage landed; the gate factors landed), and each chunk's T, P, q, K and
// V are staged once per block for up to 8 slabs. Both products with the entering state (S^T K^T
// and S^T q^T) share its A fragments before the second barrier, so the chunk's only waits after
// it are on its own products. Where a block has warps without a slab (a level of few nodes),
// those alone compute the factors and stage the next chunk: they only arrive at the second
// barrier, right after the factors, and issue the next chunk's copies while the others compute.
//
// Key halves (Dk padded to a multiple of 32: every real model): S^T K^T and S^T q^T are summed as
// the products over the first half of the keys plus those over the second, always. A level of
// few nodes (fewer slabs than two per SM: one or two QuALITY trunks) leaves most schedulers
// without a warp, and each warp's chunk is a chain of dependent products; there two warps share
// a slab, each holding one half of the keys of S^T, so each chain is about half as long. They
// hand their partial products over through shared memory at the chunk's second barrier (half 0
// its Z^T, half 1 its Z^T and O^T), both finish Z^T with the same fp32 addition (it commutes), so
// both form the same v_new (the triangular product, done twice) and update their own keys of
// S^T, and half 0 writes the output. A warp that holds a whole slab sums its two halves the same
// way, so a node's bits do not depend on how many nodes share its level.
//
// Precision: every product runs as bf16 m16n8k16 with fp32 sums, its fp32 operand (S^T, Y^T,
// v_new^T, (v_new f)^T) rounded to bf16 as it enters (acc_pair_as_a); the state itself stays
// fp32 in the accumulators. That is the rounding fla's chunked kernels apply (the state, v_new and
// the chunk's factors cast to the inputs' dtype for their products), i.e. what HF transformers
// and vLLM compute on the GPU. Carrying the state's operand to 16 bits instead (a high and a low
// bf16 part, two products each) cost 1.3-2.3% of a QuALITY round and came no measurably closer
// to float32, whose distance bf16 rounding elsewhere dominates
// (bench/results/2026-11-30-gemm-tuning-graphs.md).
//
// B fragments by ldmatrix: T^T, P^T, K^T and q^T from bf16 [row][col] tiles (a row's column
// pair in one register), K by ldmatrix.trans (one key's row pair). Row paddings make all of them
// free of bank conflicts for Dk = Dv = 128.
//
// Chunk rows past a node's end are zeros in shared memory (T, P, q, k, V, gamma, beta) and
// f = b = 0 there: they change neither the real rows' outputs nor the state, and they are never
// written.
#include <type_traits>

#include "kernels/gdn_chunk.cuh"

namespace flide::kernels::gdn_detail {
namespace {

constexpr int kSlab = 16;  // value columns (S^T rows) of one warp
// Named barrier (gdn_chunk.cuh) of a chunk's factors and key-half partial products: computing
// warps wait on it, warps of loaders only arrive.
constexpr int kFactorsBarrier = 1;

template <int DK, int DV>
struct StateCfg : Dims<DK, DV> {
  using D = Dims<DK, DV>;
  static constexpr int kSlabs = (DV + kSlab - 1) / kSlab;  // of a head
  static_assert(kSlabs <= kWarps && (kSlabs & (kSlabs - 1)) == 0,
                "a head's slabs fit one block and halve evenly");
  static_assert(kSlab % D::kVecV == 0 && kSlab / D::kVecV * kSlabs <= 32,
                "V's rows are staged in whole vectors, at most 32 a row (load_rows)");
  static constexpr int kUcols = kSlabs * kSlab;  // value columns staged per block, at most
  static constexpr int kKeyTiles = D::kKp / 8;   // n8 tiles of S^T's key columns (even)
  // Key halves (see the file top): from 32 keys on, S^T K^T and S^T q^T are summed as two
  // halves, and on a small level two warps share a slab, one half each.
  static constexpr bool kHalves = D::kKp % 32 == 0;
  static constexpr int kHalfSteps = kKeyTiles / 4;  // k16 steps of a half
  static constexpr int kMinSplits = 2 * kSlabs > kWarps ? 2 * kSlabs / kWarps : 1;  // shared
  static constexpr int kLdT = kChunk + 8;  // bf16 T, P: 4 mod 32 words
  static constexpr int kLdH = D::kLdH;     // bf16 q, K: 4 mod 32 words
  static constexpr int kLdV = kUcols + 8;  // bf16 V, the block's columns: 4 mod 32 words

  // Shared memory (bytes): two stages (chunk c and c + 1 in flight), then the chunk's factors.
  static constexpr int kStT = 0;
  static constexpr int kStP = kStT + kChunk * kLdT * 2;
  static constexpr int kStQ = kStP + kChunk * kLdT * 2;
  static constexpr int kStK = kStQ + kChunk * kLdH * 2;
  static constexpr int kStV = kStK + kChunk * kLdH * 2;
  static constexpr int kStGam = kStV + kChunk * kLdV * 2;
  static constexpr int kStBeta = kStGam + kChunk * 4;
  static constexpr int kStBytes = kStBeta + kChunk * 4;
  // [64] scale exp(gamma_j), [64] f_j, [64] b_j = beta_j exp(gamma_j)
  static constexpr int kFactors = 2 * kStBytes;
  // Then the key halves' partial products, per slab of the block: half 0's Z^T, half 1's Z^T
  // and O^T, each [kSlab x kChunk] fp32 as the warp's accumulator registers, lane-minor.
  static constexpr int kXchWords = kSlab * kChunk;
  static constexpr int kXch = kFactors + 3 * kChunk * 4;
  static constexpr int kBytes = kXch + (kHalves ? kWarps / 2 * 3 * kXchWords * 4 : 0);

  static_assert(kStP % 16 == 0 && kStQ % 16 == 0 && kStK % 16 == 0 && kStV % 16 == 0 &&
                    kStBytes % 16 == 0,
                "16-byte aligned regions for cp.async and ldmatrix");
  static_assert(kBytes <= 227 * 1024, "shared memory");
};

// acc[nt] += x L^T for a lower-triangular bf16 [64][kLd] tile L (T, P): B(j, i) = L[i][j], two
// row tiles of L a ldmatrix at `rows` (the lane's row address, as phase A's K^T). x is a set of
// accumulator tiles, two of them an A fragment (acc_pair_as_a); a step of 16 columns j meets
// only the row tiles that reach its first column (the rest of L is zero).
template <int kTiles>
__device__ __forceinline__ void add_lower_product(float (&acc)[kTiles][4],
                                                  const float (&x)[kTiles][4], const bf16* rows,
                                                  int ld) {
#pragma unroll
  for (int js = 0; js < kTiles / 2; ++js) {
    uint32_t a[4];
    acc_pair_as_a(a, x[2 * js], x[2 * js + 1]);
#pragma unroll
    for (int nt = 2 * js; nt < kTiles; nt += 2) {
      uint32_t b[4];
      ldsm_x4(b, rows + 8 * nt * ld + 16 * js);
#pragma unroll
      for (int h = 0; h < 2; ++h) mma_bf16(acc[nt + h], a, b[2 * h], b[2 * h + 1]);
    }
  }
}

// Grid-stride loop over items = (node * Hv + head) * splits + split: a block serves 1 / splits of
// a head's slabs, with that many warps. A level with few nodes (one request's trunk: 16 heads)
// splits its heads so that its items still fill the grid; a warp's arithmetic does not depend on
// the split, so neither do the results.
template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_state_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                     const bf16* __restrict__ v, const float* __restrict__ beta, float* state,
                     bf16* __restrict__ out, Workspace ws, int heads_k, int heads_v, int level,
                     float scale, TreeMeta meta) {
  using C = StateCfg<DK, DV>;
  constexpr int kLdT = C::kLdT, kLdH = C::kLdH, kLdV = C::kLdV;
  constexpr int kKT = C::kKeyTiles;
  constexpr int kRowTiles = kChunk / 8;  // n8 tiles of the chunk's rows
  extern __shared__ __align__(16) unsigned char smem[];
  struct Stage {
    bf16* T;      // [64][kLdT]
    bf16* P;      // [64][kLdT]
    bf16* Q;      // [64][kLdH]
    bf16* K;      // [64][kLdH]
    bf16* V;      // [64][kLdV] the block's value columns
    float* gam;   // [64]
    float* beta;  // [64]
  };
  auto stage = [&](int b) {
    unsigned char* base = smem + b * C::kStBytes;
    return Stage{
        reinterpret_cast<bf16*>(base + C::kStT),    reinterpret_cast<bf16*>(base + C::kStP),
        reinterpret_cast<bf16*>(base + C::kStQ),    reinterpret_cast<bf16*>(base + C::kStK),
        reinterpret_cast<bf16*>(base + C::kStV),    reinterpret_cast<float*>(base + C::kStGam),
        reinterpret_cast<float*>(base + C::kStBeta)};
  };
  float* ef = reinterpret_cast<float*>(smem + C::kFactors);  // [64] scale exp(gamma_j)
  float* fj = ef + kChunk;                                   // [64] exp(gamma_last - gamma_j)
  float* bj = fj + kChunk;                                   // [64] beta_j exp(gamma_j)
  float* xch = reinterpret_cast<float*>(smem + C::kXch);     // the key halves' partials

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK;
  const int64_t state_ld = int64_t(heads_v) * DK * DV, out_ld = int64_t(heads_v) * DV;
  const int64_t v_ld = out_ld;
  const int group = heads_v / heads_k;
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  // Shared slabs where a warp a slab would leave most schedulers without one (a level of one
  // or two QuALITY trunks): then each warp's chain of products per chunk is about half as long.
  const int nodes = ne - nb;
  const bool shared = C::kHalves && int64_t(nodes) * heads_v * C::kSlabs < 2 * int64_t(gridDim.x);
  int splits = shared ? C::kMinSplits : 1;
  while (splits < C::kSlabs && int64_t(nodes) * heads_v * splits * 2 <= gridDim.x) splits *= 2;
  const int slabs = C::kSlabs / splits;  // of a block
  const int computing = shared ? 2 * slabs : slabs;
  const int items = nodes * heads_v * splits;
  const bool active = warp < computing;
  const int sw = warp % slabs, half = shared ? warp / slabs : 0;  // an active warp's slab, half
  const int kt0 = half * (kKT / 2);                               // its first key tile
  const int nkt = shared ? kKT / 2 : kKT;                         // and how many
  // Warps without a slab do the block's loads and gate factors alone, off the others' path
  // (a block of one slab would otherwise spend ~20% of each chunk issuing copies, and a block of
  // four would wait ~a quarter of each chunk at the second barrier if they reached it only after
  // issuing them).
  const int loaders = computing < kWarps ? kThreads - 32 * computing : kThreads;
  const int ltid = int(threadIdx.x) - (kThreads - loaders);  // < 0: not a loader
  // Element e of an accumulator tile (S^T, Y^T, v_new^T, out^T): its row is value column
  // value_col(e) of the block, its column is column tile_col(t, e) of tile t (a key, or a chunk
  // row).
  auto value_col = [&](int e) { return kSlab * sw + g8 + 8 * (e >> 1); };
  auto tile_col = [&](int t, int e) { return 8 * t + 2 * t4 + (e & 1); };
  // The lane's element e of tile nt of a shared slab's part: 0 half 0's Z^T, 1 half 1's Z^T,
  // 2 half 1's O^T.
  auto handed = [&](int part, int nt, int e) -> float& {
    return xch[(sw * 3 + part) * C::kXchWords + 32 * (4 * nt + e) + lane];
  };
  // ldmatrix row addresses into a bf16 [64][kLdH] tile (K, q), matrices 0-3 of lane 8 m + r:
  // by_row, phase A's B(key, j) = K[j][key]: rows j (+8 for m >= 2), keys +8 for odd m;
  // by_key (.trans), phase C's B(j, key) = K[j][key]: rows j (+8 for odd m), keys +8 for m >= 2.
  const int row_m = (lane >> 4) * 8 + (lane & 7), col_m = ((lane >> 3) & 1) * 8;
  const int by_row = row_m * kLdH + col_m;
  const int by_row_t = row_m * kLdT + col_m;  // the same in a [64][kLdT] tile (T, P)
  const int by_key = (((lane >> 3) & 1) * 8 + (lane & 7)) * kLdH + (lane >> 4) * 8;

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int split = item % splits, head = (item / splits) % heads_v;
    const int node = nb + item / (splits * heads_v);
    const int kh = head / group, v0 = split * slabs * kSlab, vcols = min(slabs * kSlab, DV - v0);
    const int64_t off = meta.node_offset[node];
    const int len = meta.node_length[node];
    const int slot_in = meta.node_slot_in[node], slot_out = meta.node_slot_out[node];
    const int64_t state_head = int64_t(head) * DK * DV + v0;
    const int64_t hrow = int64_t(head) * T + off;  // workspace row of the node's first row
    const int n_chunks = (len + kChunk - 1) / kChunk;

    auto issue = [&](int ci, const Stage& st) {
      const int c0 = ci * kChunk, nrows = min(kChunk, len - c0);
      const int64_t t0 = off + c0;
      if (ltid >= 0) {
        load_tile<bf16, 8, kChunk, kLdT>(st.T, ws.T + (hrow + c0) * kChunk, kChunk, nrows, kChunk,
                                         ltid, loaders);
        load_tile<bf16, 8, kChunk, kLdT>(st.P, ws.P + (hrow + c0) * kChunk, kChunk, nrows, kChunk,
                                         ltid, loaders);
        load_tile<bf16, C::kVecK, C::kKp, kLdH>(st.Q, q + t0 * qk_ld + kh * DK, qk_ld, nrows, DK,
                                                ltid, loaders);
        load_tile<bf16, C::kVecK, C::kKp, kLdH>(st.K, k + t0 * qk_ld + kh * DK, qk_ld, nrows, DK,
                                                ltid, loaders);
        // The block's value columns of V, the rest of its slabs zero.
        load_rows<bf16, C::kVecV, kLdV>(st.V, v + t0 * v_ld + int64_t(head) * DV + v0, v_ld, nrows,
                                        vcols, kSlab / C::kVecV * slabs, ltid, loaders);
        if (ltid < kChunk) {
          stage_vector<float, 1>(st.gam + ltid, ws.gam + hrow + c0 + ltid, ltid < nrows);
          stage_vector<float, 1>(st.beta + ltid, beta + (t0 + ltid) * heads_v + head, ltid < nrows);
        }
      }
      cp_async_commit();
    };

    __syncthreads();  // the previous item is done with shared memory
    // The warp's keys of S^T in accumulator tiles over its key tiles kt0 + kt.
    float sacc[kKT][4];
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int v = value_col(e), c = tile_col(kt0 + kt, e);
        sacc[kt][e] = active && slot_in >= 0 && kt < nkt && v < vcols && c < DK
                          ? state[slot_in * state_ld + state_head + int64_t(c) * DV + v]
                          : 0.f;
      }
    if (n_chunks > 0) issue(0, stage(0));

    for (int ci = 0; ci < n_chunks; ++ci) {
      const Stage st = stage(ci & 1);
      const int c0 = ci * kChunk, nrows = min(kChunk, len - c0);
      cp_async_wait<0>();
      __syncthreads();  // stage ci visible; chunk ci - 1 is done with the other stage and factors
      const float gam_last = st.gam[nrows - 1];
      if (ltid >= 0 && ltid < kChunk) {
        const int j = ltid;
        const float e = __expf(st.gam[j]);
        ef[j] = scale * e;
        fj[j] = j < nrows ? __expf(gam_last - st.gam[j]) : 0.f;
        bj[j] = st.beta[j] * e;
      }
      // A warp of loaders alone hands the factors over before staging chunk ci + 1 (issue
      // copies on loaders only, so the computing warps of such a block pass straight through).
      if (!active) bar_arrive(kFactorsBarrier, kThreads);
      if (ci + 1 < n_chunks) issue(ci + 1, stage((ci + 1) & 1));
      if (!active) continue;

      // Phase A: Z^T = S^T K^T and O^T = S^T q^T, sharing the A fragments of S^T per 16 keys;
      // ldmatrix hands each B fragment over as K and q sit, rows j.
      float acc_y[kRowTiles][4] = {}, acc_o[kRowTiles][4] = {};
      // Steps [first, first + count) of 16 keys from the warp's first key, into acc_y (kY) and
      // acc_o (kO).
      auto phase_a = [&](auto first, auto count, auto y, auto o) {
        constexpr int k0 = decltype(first)::value, kn = decltype(count)::value;
        constexpr bool kY = decltype(y)::value, kO = decltype(o)::value;
#pragma unroll
        for (int ks = k0; ks < k0 + kn; ++ks) {
          uint32_t a[4];
          acc_pair_as_a(a, sacc[2 * ks], sacc[2 * ks + 1]);
          const int key = 8 * kt0 + 16 * ks;
#pragma unroll
          for (int nt = 0; nt < kRowTiles; nt += 2) {
            uint32_t bk[4], bq[4];
            if constexpr (kY) ldsm_x4(bk, st.K + by_row + 8 * nt * kLdH + key);
            if constexpr (kO) ldsm_x4(bq, st.Q + by_row + 8 * nt * kLdH + key);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if constexpr (kY) mma_bf16(acc_y[nt + h], a, bk[2 * h], bk[2 * h + 1]);
              if constexpr (kO) mma_bf16(acc_o[nt + h], a, bq[2 * h], bq[2 * h + 1]);
            }
          }
        }
      };
      using Zero = std::integral_constant<int, 0>;
      using Half = std::integral_constant<int, C::kHalfSteps>;
      using Yes = std::true_type;
      using No = std::false_type;
      if constexpr (!C::kHalves) {
        phase_a(Zero{}, std::integral_constant<int, kKT / 2>{}, Yes{}, Yes{});
      } else if (shared) {  // this warp's half; hand its partial products over
        phase_a(Zero{}, Half{}, Yes{}, Yes{});
#pragma unroll
        for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            handed(half, nt, e) = acc_y[nt][e];
            if (half == 1) handed(2, nt, e) = acc_o[nt][e];
          }
      } else {  // both halves, summed as shared warps sum them; Z^T, then O^T (registers)
        float low[kRowTiles][4];
        auto both_halves = [&](auto y, float(&acc)[kRowTiles][4]) {
          using O = std::bool_constant<!decltype(y)::value>;
          phase_a(Zero{}, Half{}, y, O{});
#pragma unroll
          for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) low[nt][e] = acc[nt][e], acc[nt][e] = 0.f;
          phase_a(Half{}, Half{}, y, O{});
#pragma unroll
          for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] = low[nt][e] + acc[nt][e];
        };
        both_halves(Yes{}, acc_y);
        both_halves(No{}, acc_o);
      }
      bar_sync(kFactorsBarrier, kThreads);  // the factors and the partial products written
      // Both halves sum Z^T alike (fp32 addition commutes), so they hold the same v_new; half 0
      // alone writes the output.
      if (shared) {
#pragma unroll
        for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc_y[nt][e] += handed(half ^ 1, nt, e);
            if (half == 0) acc_o[nt][e] += handed(2, nt, e);
          }
      }

      // Phase B: Y^T = beta V^T - Z^T diag(b), then v_new^T = Y^T T^T (T is lower triangular).
      for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int v = value_col(e), j = tile_col(nt, e);
          acc_y[nt][e] = st.beta[j] * __bfloat162float(st.V[j * kLdV + v]) - bj[j] * acc_y[nt][e];
        }
      float acc_v[kRowTiles][4] = {};
      add_lower_product(acc_v, acc_y, st.T + by_row_t, kLdT);

      // The output, out^T = scale exp(gamma) O^T + v_new^T P^T (P lower triangular too).
      if (half == 0) {
#pragma unroll
        for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_o[nt][e] *= ef[tile_col(nt, e)];
        add_lower_product(acc_o, acc_v, st.P + by_row_t, kLdT);
#pragma unroll
        for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int v = value_col(e), i = tile_col(nt, e);
            if (i < nrows && v < vcols)
              out[(off + c0 + i) * out_ld + int64_t(head) * DV + v0 + v] =
                  __float2bfloat16_rn(acc_o[nt][e]);
          }
      }
#pragma unroll
      for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_v[nt][e] *= fj[tile_col(nt, e)];  // (v_new f)^T

      // Phase C: S^T = exp(gamma_last) S^T + (v_new f)^T K; a leaf's final state is not kept.
      if (ci + 1 == n_chunks && slot_out < 0) break;
      const float decay = __expf(gam_last);
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[kt][e] *= decay;
#pragma unroll
      for (int js = 0; js < kRowTiles / 2; ++js) {
        uint32_t a[4];
        acc_pair_as_a(a, acc_v[2 * js], acc_v[2 * js + 1]);
#pragma unroll
        for (int kt = 0; kt < kKT; kt += 2) {
          if (kt >= nkt) break;
          uint32_t b[4];
          ldsm_x4_trans(b, st.K + by_key + 16 * js * kLdH + 8 * (kt0 + kt));
#pragma unroll
          for (int h = 0; h < 2; ++h) mma_bf16(sacc[kt + h], a, b[2 * h], b[2 * h + 1]);
        }
      }
    }

    // Final state: each thread writes exactly the elements it read, so slot_out may be slot_in.
    if (active && slot_out >= 0) {
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int v = value_col(e), c = tile_col(kt0 + kt, e);
          if (kt < nkt && v < vcols && c < DK)
            state[slot_out * state_ld + state_head + int64_t(c) * DV + v] = sacc[kt][e];
        }
    }
  }
}

}  // namespace

template <int DK, int DV>
cudaError_t launch_state(const GdnArgs& a) {
  using C = StateCfg<DK, DV>;
  const int blocks = stride_grid(int64_t(a.meta.max_level_nodes) * a.heads_v * C::kSlabs, a.sms, 1);
  return launch_with_smem<gdn_state_kernel<DK, DV>, C::kBytes>(
      blocks, a.stream, a.q, a.k, a.v, a.beta, a.state, a.out, a.ws, a.heads_k, a.heads_v, a.level,
      a.scale, a.meta);
}

#define FLIDE_GDN_INSTANTIATE(DK, DV) template cudaError_t launch_state<DK, DV>(const GdnArgs&);
FLIDE_GDN_SMALL_SHAPES(FLIDE_GDN_INSTANTIATE)
#undef FLIDE_GDN_INSTANTIATE

}  // namespace flide::kernels::gdn_detail
