// The chunked delta rule's sequential half and its output (gdn.h): one block per (node, value
// head, share of its value columns) walks the node's chunks in order with the state in registers,
// transposed: each warp owns a slab of 16 rows of S^T (value columns of S) against every key, as
// mma.sync accumulators. Per chunk, from the state entering it (b_j = beta_j exp(gamma_j)):
//   Y^T     = beta V^T - (S^T K^T) diag(b)
//   v_new^T = Y^T T^T                                          (fla's U - W S, in T's factors)
//   out^T   = Dk^-1/2 exp(gamma) (S^T q^T) + v_new^T P^T      (to bf16 out)
//   S^T     = exp(gamma_last) S^T + (v_new f)^T K,  f_j = exp(gamma_last - gamma_j).
// Applying T here instead of reading W = T (b K) and U = T (beta V) from the prepare kernel
// moves 64 instead of 2 (Dk + Dv) fp32 values per chunk row, and this kernel is bound by what it
// reads; the extra product (Y^T T^T, triangular) is a fifth of the chunk's tensor-core work.
// Why transposed: the state is then the A operand of both products with S, and Y^T and v_new^T
// the A operands of the others, and an m16n8 accumulator is an m16n8k8 tf32 A fragment as it
// stands once the k index is permuted (k slot t <-> column 2t, slot t + 4 <-> 2t + 1; the B
// fragments read rows in the same order). So neither the state nor v_new ever goes through
// shared or global memory, the warps share nothing but the staged inputs (two barriers per
// chunk: the stage landed; the gate factors landed), and each chunk's T, P, q, K and V are
// staged once per block for up to 8 slabs. Both products with the entering state (S^T K^T and
// S^T q^T) share its A fragments before the second barrier, so the chunk's only waits after it
// are on its own products.
//
// B fragments: T^T and P^T from fp32 [row][col] tiles (one 8-byte load: columns 2t, 2t + 1),
// q^T and K^T from bf16 q and K (one 4-byte load of the bf16 pair), K from bf16 K [row][key] by
// ldmatrix.trans (rows 2t and 2t + 1 of one key column in one register). Row paddings make all
// of them free of bank conflicts for Dk = Dv = 128.
//
// Chunk rows past a node's end are zeros in shared memory (T, P, q, k, V, gamma, beta) and
// f = b = 0 there: they change neither the real rows' outputs nor the state, and they are never
// written.
#include "kernels/gdn_chunk.cuh"

namespace flide::kernels::gdn_detail {
namespace {

constexpr int kSlab = 16;  // value columns (S^T rows) of one warp

template <int DK, int DV>
struct StateCfg : Dims<DK, DV> {
  using D = Dims<DK, DV>;
  static constexpr int kSlabs = (DV + kSlab - 1) / kSlab;  // of a head
  static_assert(kSlabs <= kWarps && (kSlabs & (kSlabs - 1)) == 0,
                "a head's slabs fit one block and halve evenly");
  static constexpr int kUcols = kSlabs * kSlab;   // value columns staged per block, at most
  static constexpr int kKeyTiles = (DK + 7) / 8;  // n8 tiles of S^T's key columns
  static constexpr int kLdT = kChunk + 8;         // fp32 T, P: 8 mod 32 words (8-byte loads)
  static constexpr int kLdH = D::kLdH;            // bf16 q, K: 4 mod 32 words
  static constexpr int kLdV = kUcols + 8;         // bf16 V, the block's columns: 4 mod 32 words

  // Shared memory (bytes): two stages (chunk c and c + 1 in flight), then the chunk's factors.
  static constexpr int kStT = 0;
  static constexpr int kStP = kStT + kChunk * kLdT * 4;
  static constexpr int kStQ = kStP + kChunk * kLdT * 4;
  static constexpr int kStK = kStQ + kChunk * kLdH * 2;
  static constexpr int kStV = kStK + kChunk * kLdH * 2;
  static constexpr int kStGam = kStV + kChunk * kLdV * 2;
  static constexpr int kStBeta = kStGam + kChunk * 4;
  static constexpr int kStBytes = kStBeta + kChunk * 4;
  // [64] scale exp(gamma_j), [64] f_j, [64] b_j = beta_j exp(gamma_j)
  static constexpr int kFactors = 2 * kStBytes;
  static constexpr int kBytes = kFactors + 3 * kChunk * 4;

  static_assert(kStP % 16 == 0 && kStQ % 16 == 0 && kStK % 16 == 0 && kStV % 16 == 0 &&
                    kStBytes % 16 == 0,
                "16-byte aligned regions for cp.async and ldmatrix");
  static_assert(kBytes <= 227 * 1024, "shared memory");
};

// B fragment (k8 step at chunk row r0, key tile at column n0) of B(j, key) = K[j][key], for
// `n` consecutive key tiles: ldmatrix.trans hands lane 4 g + t the bf16 pair (K[r0 + 2t][n0 + g],
// K[r0 + 2t + 1][n0 + g]). p = &K[r0][n0].
template <int N>
__device__ __forceinline__ void frags_k(uint32_t (&b)[N][2], const bf16* p, int ld, int lane) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix groups of 1, 2 or 4 matrices");
  const bf16* row = p + (lane & 7) * ld + ((lane >> 3) % N) * 8;
  const uint32_t s = smem_u32(row);
  uint32_t r[4];
  if constexpr (N == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(s));
#pragma unroll
  for (int i = 0; i < N; ++i) b[i][0] = r[i] << 16, b[i][1] = r[i] & 0xffff0000u;
}

// dst [kChunk][kLd] <- the block's value columns of V: rows r < nrows, columns c < cols; the
// rest of its `slabs` slabs is zero (unlike load_tile, whose width is static: a block reads only
// its own slabs).
template <typename T, int kVec, int kLd>
__device__ __forceinline__ void load_slab_tile(T* dst, const T* src, int64_t src_ld, int nrows,
                                               int cols, int slabs, int tid, int nthreads) {
  static_assert(kSlab % kVec == 0 && ((kSlab / kVec) & (kSlab / kVec - 1)) == 0,
                "a power of two of vectors per slab");
  const int shift = __ffs(kSlab / kVec * slabs) - 1;  // log2 of the vectors of a row
  for (int i = tid; i < kChunk << shift; i += nthreads) {
    const int r = i >> shift, c = (i & ((1 << shift) - 1)) * kVec;
    stage_vector<T, kVec>(dst + r * kLd + c, src + r * src_ld + c, r < nrows && c < cols);
  }
}

// acc[nt] += x[jt] L^T over the row tiles jt <= nt, for a lower-triangular fp32 [64][kLd] tile L
// already rounded to tf32 (T, P): B(j, i) = L[i][j], the pair (2t, 2t + 1) in one 8-byte load.
// x is a set of accumulator tiles used as A fragments (acc_as_a).
template <int kTiles, int kLd>
__device__ __forceinline__ void add_lower_product(float (&acc)[kTiles][4],
                                                  const float (&x)[kTiles][4], const float* L,
                                                  int g8, int t4) {
#pragma unroll
  for (int jt = 0; jt < kTiles; ++jt) {
    uint32_t a[4];
    acc_as_a(a, x[jt]);
#pragma unroll
    for (int nt = jt; nt < kTiles; ++nt) {
      const float2 l = *reinterpret_cast<const float2*>(L + (8 * nt + g8) * kLd + 8 * jt + 2 * t4);
      const uint32_t b[2] = {__float_as_uint(l.x), __float_as_uint(l.y)};
      mma(acc[nt], a, b);
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
  constexpr int kKGroup = kKT % 4 == 0 ? 4 : kKT % 2 == 0 ? 2 : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  struct Stage {
    float* T;     // [64][kLdT]
    float* P;     // [64][kLdT]
    bf16* Q;      // [64][kLdH]
    bf16* K;      // [64][kLdH]
    bf16* V;      // [64][kLdV] the block's value columns
    float* gam;   // [64]
    float* beta;  // [64]
  };
  auto stage = [&](int b) {
    unsigned char* base = smem + b * C::kStBytes;
    return Stage{
        reinterpret_cast<float*>(base + C::kStT),   reinterpret_cast<float*>(base + C::kStP),
        reinterpret_cast<bf16*>(base + C::kStQ),    reinterpret_cast<bf16*>(base + C::kStK),
        reinterpret_cast<bf16*>(base + C::kStV),    reinterpret_cast<float*>(base + C::kStGam),
        reinterpret_cast<float*>(base + C::kStBeta)};
  };
  float* ef = reinterpret_cast<float*>(smem + C::kFactors);  // [64] scale exp(gamma_j)
  float* fj = ef + kChunk;                                   // [64] exp(gamma_last - gamma_j)
  float* bj = fj + kChunk;                                   // [64] beta_j exp(gamma_j)

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK;
  const int64_t state_ld = int64_t(heads_v) * DK * DV, out_ld = int64_t(heads_v) * DV;
  const int64_t v_ld = out_ld;
  const int group = heads_v / heads_k;
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  int splits = 1;
  while (splits < C::kSlabs && int64_t(ne - nb) * heads_v * splits * 2 <= gridDim.x) splits *= 2;
  const int slabs = C::kSlabs / splits;  // of a block
  const int items = (ne - nb) * heads_v * splits;
  const bool active = warp < slabs;
  // Warps without a slab do the block's loads and gate factors alone, off the others' path
  // (a block of one slab would otherwise spend ~20% of each chunk issuing copies).
  const int loaders = slabs < kWarps ? kThreads - 32 * slabs : kThreads;
  const int ltid = int(threadIdx.x) - (kThreads - loaders);  // < 0: not a loader
  // Element e of an accumulator tile (S^T, Y^T, v_new^T, out^T): its row is value column
  // value_col(e) of the block, its column is column tile_col(t, e) of tile t (a key, or a chunk
  // row).
  auto value_col = [&](int e) { return kSlab * warp + g8 + 8 * (e >> 1); };
  auto tile_col = [&](int t, int e) { return 8 * t + 2 * t4 + (e & 1); };

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
        load_tile<float, 4, kChunk, kLdT>(st.T, ws.T + (hrow + c0) * kChunk, kChunk, nrows, kChunk,
                                          ltid, loaders);
        load_tile<float, 4, kChunk, kLdT>(st.P, ws.P + (hrow + c0) * kChunk, kChunk, nrows, kChunk,
                                          ltid, loaders);
        load_tile<bf16, C::kVecK, C::kKp, kLdH>(st.Q, q + t0 * qk_ld + kh * DK, qk_ld, nrows, DK,
                                                ltid, loaders);
        load_tile<bf16, C::kVecK, C::kKp, kLdH>(st.K, k + t0 * qk_ld + kh * DK, qk_ld, nrows, DK,
                                                ltid, loaders);
        load_slab_tile<bf16, C::kVecV, kLdV>(st.V, v + t0 * v_ld + int64_t(head) * DV + v0, v_ld,
                                             nrows, vcols, slabs, ltid, loaders);
        if (ltid < kChunk) {
          stage_vector<float, 1>(st.gam + ltid, ws.gam + hrow + c0 + ltid, ltid < nrows);
          stage_vector<float, 1>(st.beta + ltid, beta + (t0 + ltid) * heads_v + head, ltid < nrows);
        }
      }
      cp_async_commit();
    };

    __syncthreads();  // the previous item is done with shared memory
    // S^T in accumulator tiles over the key tiles kt.
    float sacc[kKT][4];
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int v = value_col(e), c = tile_col(kt, e);
        sacc[kt][e] = active && slot_in >= 0 && v < vcols && c < DK
                          ? state[slot_in * state_ld + state_head + int64_t(c) * DV + v]
                          : 0.f;
      }
    if (n_chunks > 0) issue(0, stage(0));

    for (int ci = 0; ci < n_chunks; ++ci) {
      const Stage st = stage(ci & 1);
      const int c0 = ci * kChunk, nrows = min(kChunk, len - c0);
      cp_async_wait<0>();
      __syncthreads();  // stage ci visible; chunk ci - 1 is done with the other stage and factors
      if (ci + 1 < n_chunks) issue(ci + 1, stage((ci + 1) & 1));
      const float gam_last = st.gam[nrows - 1];
      if (ltid >= 0 && ltid < kChunk) {
        const int j = ltid;
        const float e = __expf(st.gam[j]);
        ef[j] = scale * e;
        fj[j] = j < nrows ? __expf(gam_last - st.gam[j]) : 0.f;
        bj[j] = st.beta[j] * e;
      }

      // Phase A: Z^T = S^T K^T and O^T = S^T q^T, sharing the A fragments of S^T.
      float acc_y[kRowTiles][4] = {}, acc_o[kRowTiles][4] = {};
      if (active) {
#pragma unroll
        for (int kt = 0; kt < kKT; ++kt) {
          uint32_t a[4];
          acc_as_a(a, sacc[kt]);
#pragma unroll
          for (int nt = 0; nt < kRowTiles; ++nt) {
            const int r = 8 * nt + g8, c = 8 * kt + 2 * t4;
            const uint32_t kp = *reinterpret_cast<const uint32_t*>(st.K + r * kLdH + c);
            const uint32_t bk[2] = {kp << 16, kp & 0xffff0000u};
            mma(acc_y[nt], a, bk);
            const uint32_t qp = *reinterpret_cast<const uint32_t*>(st.Q + r * kLdH + c);
            const uint32_t bq[2] = {qp << 16, qp & 0xffff0000u};
            mma(acc_o[nt], a, bq);
          }
        }
      }
      __syncthreads();  // the factors written
      if (!active) continue;

      // Phase B: Y^T = beta V^T - Z^T diag(b), then v_new^T = Y^T T^T (T is lower triangular).
      for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int v = value_col(e), j = tile_col(nt, e);
          acc_y[nt][e] = st.beta[j] * __bfloat162float(st.V[j * kLdV + v]) - bj[j] * acc_y[nt][e];
        }
      float acc_v[kRowTiles][4] = {};
      add_lower_product<kRowTiles, kLdT>(acc_v, acc_y, st.T, g8, t4);

      // The output, out^T = scale exp(gamma) O^T + v_new^T P^T (P lower triangular too).
#pragma unroll
      for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_o[nt][e] *= ef[tile_col(nt, e)];
      add_lower_product<kRowTiles, kLdT>(acc_o, acc_v, st.P, g8, t4);
#pragma unroll
      for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int v = value_col(e), i = tile_col(nt, e);
          if (i < nrows && v < vcols)
            out[(off + c0 + i) * out_ld + int64_t(head) * DV + v0 + v] =
                __float2bfloat16_rn(acc_o[nt][e]);
          acc_v[nt][e] *= fj[i];  // (v_new f)^T, the update's A
        }

      // Phase C: S^T = exp(gamma_last) S^T + (v_new f)^T K; a leaf's final state is not kept.
      if (ci + 1 == n_chunks && slot_out < 0) break;
      const float decay = __expf(gam_last);
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[kt][e] *= decay;
#pragma unroll
      for (int jt = 0; jt < kRowTiles; ++jt) {
        uint32_t a[4];
        acc_as_a(a, acc_v[jt]);
#pragma unroll
        for (int kt = 0; kt < kKT; kt += kKGroup) {
          uint32_t b[kKGroup][2];
          frags_k<kKGroup>(b, st.K + 8 * jt * kLdH + 8 * kt, kLdH, lane);
#pragma unroll
          for (int i = 0; i < kKGroup; ++i) mma(sacc[kt + i], a, b[i]);
        }
      }
    }

    // Final state: each thread writes exactly the elements it read, so slot_out may be slot_in.
    if (active && slot_out >= 0) {
#pragma unroll
      for (int kt = 0; kt < kKT; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int v = value_col(e), c = tile_col(kt, e);
          if (v < vcols && c < DK)
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
  return launch_with_smem(gdn_state_kernel<DK, DV>, blocks, C::kBytes, a.stream, a.q, a.k, a.v,
                          a.beta, a.state, a.out, a.ws, a.heads_k, a.heads_v, a.level, a.scale,
                          a.meta);
}

#define FLIDE_GDN_INSTANTIATE(DK, DV) template cudaError_t launch_state<DK, DV>(const GdnArgs&);
FLIDE_GDN_SHAPES(FLIDE_GDN_INSTANTIATE)
#undef FLIDE_GDN_INSTANTIATE

}  // namespace flide::kernels::gdn_detail
