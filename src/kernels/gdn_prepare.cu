// The chunked delta rule's state-free half (gdn.h): "plan" lists a level's chunks, "prepare"
// computes everything a chunk needs that does not depend on the state, one block per (chunk,
// value head) item, all in parallel.
//
// Prepare, per item, in phases separated by barriers (warps 0-1 carry the serial part, the
// triangular inverse, while warps 2-7 do independent work):
//   B  all warps: L = -(beta_i k_i.k_j exp(gamma_i - gamma_j)) for j < i, only on the ten 16x16
//      blocks on and below the diagonal;
//   C  warps 0-1: T = (I - L)^-1 blockwise: the diagonal 16x16 blocks by forward substitution
//      (one column per lane, in registers), then T_ba = T_bb L_ba T_aa for the blocks (1, 0) and
//      (3, 2), then T[32:64, 0:32] = T_hi L[32:64, 0:32] T_lo (hi, lo: the diagonal 32x32 halves);
//      warps 2-7: P = scale q_i.k_j exp(gamma_i - gamma_j) (j <= i) to the workspace;
//   E  all warps: T to the workspace, in natural column order, zero above the diagonal.
// Both go to the workspace rounded to bf16, the operand type of the state kernel's products
// with them (gdn.h).
// The state kernel applies T itself (v_new = T (beta V - beta exp(gamma) K S)), so W = T (beta
// exp(gamma) K) and U = T (beta V), 32 times T's size, are never formed.
// Products run on tensor cores: K K^T and Q K^T as bf16 m16n8k16 (exact products of bf16 inputs,
// fp32 accumulation, like the tf32 form), the rest as tf32 m16n8k8. The forward substitution is
// fp32, in the CPU's order, on L kept unrounded; the off-diagonal blocks of T are products of
// tf32-rounded operands (2^-11 relative, the rounding T gets anyway as an mma operand)
// accumulated in fp32.
//
// T is kept rounded to tf32 in shared memory with the columns of every 8-column group in the
// order 0 2 4 6 1 3 5 7: ldmatrix then hands a lane the columns (2t, 2t+1) of a row as its A
// fragment's k pair (t, t + 4), which lets the inverse's products with T take their B fragments
// as row pairs (2t, 2t+1), an accumulator tile reused as an A fragment in registers (its lane
// holds columns 2t, 2t+1 of its rows).
//
// Shared memory is six equal slots: K and Q of two items, L and T. The next item's K and Q (and
// g, beta) load into the other pair while this item computes, from its first barrier on, so the
// loads have a whole item to land (with them issued only behind the inverse, a block spent about
// half of each item waiting on them). For Dk = 128 (every Qwen3.5 size) thread 0 sends K and Q as
// four bulk tensor copies, 128-byte swizzled, completing on a barrier a pair: the cp.async copies
// had cost every warp ~215 instructions an item, 15% of its instructions
// (bench/results/2026-12-01-tma-gdn-pipelining.md).
//
// Chunk rows past a node's end (its last chunk may be short) have g = beta = 0 in shared memory,
// and L is zero on them: they change neither the real rows' outputs nor the state, like HF's
// padding. Their k and q are zeros where cp.async loads them, and whatever stream rows follow
// (zeros past the stream's end) where TMA does: those reach no stored value (L's rows are set,
// not computed, and P's entries past a row's own are never products). Those rows are never
// written back: workspace rows are indexed by stream row. Nor are the 16-row strips past a short
// chunk's rows computed at all (L, the inverse's blocks, P): a question's tail chunk of a few rows
// then costs its item the diagonal block alone, not the inverse's serial chain (gdn 7.47 -> 7.02
// ms a QuALITY round of 4, bench/results/2026-12-01-prepare-short-chunks.md).
#include "kernels/gdn_chunk.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

namespace flide::kernels::gdn_detail {
namespace {

constexpr int kPlanThreads = 1024;

// Shared-memory layout of the prepare kernel (bytes).
template <int DK, int DV>
struct PrepCfg : Dims<DK, DV> {
  using D = Dims<DK, DV>;
  static constexpr bool kTma = DK == 128;  // K and Q by bulk tensor copies (file comment)
  static constexpr int kBytesH = kChunk * D::kLdH * 2;  // bf16 [64][kLdH] K, Q
  static constexpr int kBytesC = kChunk * D::kLdC * 4;  // fp32 [64][kLdC] L, T
  static constexpr int kSlot = ((kBytesH > kBytesC ? kBytesH : kBytesC) + 127) / 128 * 128;
  static constexpr int kK = 0;                        // [2] bf16 keys of two items
  static constexpr int kQ = 2 * kSlot;                // [2] bf16 queries of two items
  static constexpr int kL = 4 * kSlot;                // fp32 L
  static constexpr int kT = 5 * kSlot;                // fp32 T
  static constexpr int kRaw = 6 * kSlot;              // fp32 [2][2][64] g, beta of two items
  static constexpr int kGam = kRaw + 4 * kChunk * 4;  // fp32 [64] in-chunk cumulative g
  static constexpr int kBars = kGam + kChunk * 4;     // [2] the K/Q pairs' copy barriers
  // The swizzled tiles want 1024-byte alignment, which the dynamic base does not promise.
  static constexpr int kBytes = kBars + 2 * 8 + (kTma ? 1024 : 0);
  static_assert(kSlot % 1024 == 0 || !kTma, "swizzled slots stay 1024-byte aligned");
};

// Where a staged K or Q tile [64 rows][kKp keys] at `tile` keeps row r's 16-byte unit u (keys
// 8 u .. 8 u + 7): by TMA, two 64-key halves of 128-byte rows, swizzled; else rows of kLdH.
template <int DK>
__device__ __forceinline__ uint32_t key_unit(uint32_t tile, int r, int u) {
  if constexpr (PrepCfg<DK, DK>::kTma)
    return wgmma::swizzled(tile, kChunk, r, 8 * u);
  else
    return tile + uint32_t(r * Dims<DK, DK>::kLdH + 8 * u) * 2u;
}

// ---------------------------------------------------------------------------------------------
// Plan: the level's chunks, in node order. One block of kPlanThreads.

__global__ void __launch_bounds__(kPlanThreads)
    gdn_plan_kernel(int2* chunks, int level, TreeMeta meta) {
  __shared__ int warp_sum[kPlanThreads / 32];
  __shared__ int base;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  if (threadIdx.x == 0) base = 0;
  __syncthreads();
  for (int first = nb; first < ne; first += kPlanThreads) {
    const int n = first + int(threadIdx.x);
    const int count = n < ne ? (meta.node_length[n] + kChunk - 1) / kChunk : 0;
    int incl = count;  // inclusive scan over the block
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d) incl += y;
    }
    if (lane == 31) warp_sum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int s = warp_sum[lane];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, s, d);
        if (lane >= d) s += y;
      }
      warp_sum[lane] = s;
    }
    __syncthreads();
    const int start = base + (warp > 0 ? warp_sum[warp - 1] : 0) + incl - count;
    for (int c = 0; c < count; ++c) chunks[1 + start + c] = make_int2(n, c * kChunk);
    __syncthreads();  // everyone has read base and warp_sum
    if (threadIdx.x == 0) base += warp_sum[31];
    __syncthreads();
  }
  if (threadIdx.x == 0) chunks[0] = make_int2(base, 0);
}

// ---------------------------------------------------------------------------------------------
// Prepare helpers

// A fragment of a row-major [m][k] fp32 tile already rounded to tf32 (p = &A[m0][k0]), in one
// ldmatrix: its four 8x8 b16 matrices are 8 rows x 4 words, and ldmatrix hands lane 4 g + t word
// t of row g, the tf32 A layout. p must be 16-byte aligned and ld a multiple of 4.
__device__ __forceinline__ void frag_a_tf32(uint32_t (&a)[4], const float* p, int ld, int lane) {
  ldsm_x4(a, p + ((lane >> 3) & 1) * 8 * ld + (lane & 7) * ld + (lane >> 4) * 4);
}

// tf32 fragments with k paired as (2t, 2t+1) in place of (t, t+4) (file-top comment).
// B of a row-major fp32 tile, p = &B[k0][n0], rounded here or already tf32.
__device__ __forceinline__ void frag_b_pair(uint32_t (&b)[2], const float* p, int ld, int g,
                                            int t) {
  b[0] = to_tf32(p[2 * t * ld + g]);
  b[1] = to_tf32(p[(2 * t + 1) * ld + g]);
}
__device__ __forceinline__ void frag_b_pair_tf32(uint32_t (&b)[2], const float* p, int ld, int g,
                                                 int t) {
  b[0] = __float_as_uint(p[2 * t * ld + g]);
  b[1] = __float_as_uint(p[(2 * t + 1) * ld + g]);
}
// An accumulator tile rounded to tf32 into a row-major tile, p = &X[m0][n0].
__device__ __forceinline__ void store_acc_tf32(float* p, int ld, const float (&c)[4], int g,
                                               int t) {
  *reinterpret_cast<float2*>(p + g * ld + 2 * t) = make_float2(round_tf32(c[0]), round_tf32(c[1]));
  *reinterpret_cast<float2*>(p + (g + 8) * ld + 2 * t) =
      make_float2(round_tf32(c[2]), round_tf32(c[3]));
}

// Rows [r0, r0 + 16) x columns [c0, c0 + 8 NT) of the triangular inverse T, from blocks of T
// already in place: T_rc = (T_rd L_dc) T_cc, d = columns [c0 + 8 NT, c0 + 8 NT + 8 kd), where
// row strip r0 of T is zero right of d (kd <= NT, warp-uniform), and T_cc is lower triangular.
template <int NT, int kLd>
__device__ __forceinline__ void inverse_block(float* Ts, const float* Ls, int r0, int c0, int kd,
                                              int lane, int g8, int t4) {
  const int d0 = c0 + 8 * NT;
  float z[NT][4] = {};
#pragma unroll
  for (int kk = 0; kk < NT; ++kk) {
    if (kk >= kd) continue;
    uint32_t at[4];
    frag_a_tf32(at, Ts + r0 * kLd + d0 + 8 * kk, kLd, lane);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t bl[2];
      frag_b_pair(bl, Ls + (d0 + 8 * kk) * kLd + c0 + 8 * nt, kLd, g8, t4);
      mma(z[nt], at, bl);
    }
  }
  float y[NT][4] = {};
#pragma unroll
  for (int kk = 0; kk < NT; ++kk) {
    uint32_t az[4];
    acc_as_a(az, z[kk]);
#pragma unroll
    for (int nt = 0; nt <= kk; ++nt) {  // T_cc is zero above its diagonal
      uint32_t bt[2];
      frag_b_pair_tf32(bt, Ts + (c0 + 8 * kk) * kLd + c0 + 8 * nt, kLd, g8, t4);
      mma(y[nt], az, bt);
    }
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) store_acc_tf32(Ts + r0 * kLd + c0 + 8 * nt, kLd, y[nt], g8, t4);
}

// acc[s] = X[m0 .. m0 + 16][kKp] K[n0 + 8 s .. + 8][kKp]^T for s < n (n <= kMax, warp-uniform);
// X and K staged tiles (key_unit) at x and kn.
template <int kMax, int kKp, int DK>
__device__ __forceinline__ void gram_tiles(float (&acc)[kMax][4], uint32_t x, int m0, uint32_t kn,
                                           int n0, int n, int lane) {
  const int ra = m0 + (lane & 7) + ((lane >> 3) & 1) * 8, ua = lane >> 4;
  const int rb = n0 + (lane & 7), ub = (lane >> 3) & 1;
#pragma unroll
  for (int s = 0; s < kMax; ++s)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[s][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kKp / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4(a, key_unit<DK>(x, ra, ua + 2 * kk));
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n) {
        uint32_t b[2];
        ldsm_x2(b, key_unit<DK>(kn, rb + 8 * s, ub + 2 * kk));
        mma_bf16(acc[s], a, b[0], b[1]);
      }
    }
  }
}

// Runs of n8 tiles (row strip mt, first tile nt0, count n) of the 64x64 lower blocks, one byte
// per warp. L: 20 tiles over the 8 warps; P: the same 20 over warps 2-7, and the run that ends a
// strip's lower blocks also writes the strip's zero tiles.
constexpr uint64_t tile_run(int w, int mt, int nt0, int n) {
  return uint64_t(mt | nt0 << 2 | n << 5) << (8 * w);
}
constexpr uint64_t kLRuns = tile_run(0, 3, 0, 3) | tile_run(1, 3, 3, 3) | tile_run(2, 3, 6, 2) |
                            tile_run(3, 2, 0, 3) | tile_run(4, 2, 3, 3) | tile_run(5, 1, 0, 2) |
                            tile_run(6, 1, 2, 2) | tile_run(7, 0, 0, 2);
constexpr uint64_t kPRuns = tile_run(0, 3, 0, 4) | tile_run(1, 3, 4, 4) | tile_run(2, 2, 0, 3) |
                            tile_run(3, 2, 3, 3) | tile_run(4, 1, 0, 4) | tile_run(5, 0, 0, 2);

// ---------------------------------------------------------------------------------------------
// Prepare: per (chunk, value head) gamma, P, T. Stride loop over items = chunk * Hv + head.

template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 2)
    gdn_prepare_kernel(const __grid_constant__ CUtensorMap map_q,
                       const __grid_constant__ CUtensorMap map_k, const bf16* __restrict__ q,
                       const bf16* __restrict__ k, const float* __restrict__ g,
                       const float* __restrict__ beta, Workspace ws, int heads_k, int heads_v,
                       float scale, TreeMeta meta) {
  using C = PrepCfg<DK, DV>;
  constexpr int kLdH = C::kLdH, kLdC = C::kLdC;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (C::kTma) smem += (1024u - smem_u32(smem_raw) % 1024u) % 1024u;
  const uint32_t bars = smem_u32(smem + C::kBars);
  float* Ls = reinterpret_cast<float*>(smem + C::kL);       // [64][kLdC] -A (strictly lower)
  float* Ts = reinterpret_cast<float*>(smem + C::kT);       // [64][kLdC] (I + A)^-1, tf32, permuted
  float* raw = reinterpret_cast<float*>(smem + C::kRaw);    // [2][g 64, beta 64]
  float* gam_s = reinterpret_cast<float*>(smem + C::kGam);  // [64] cumulative g
  // An item's keys and queries, [64][kKp] each (key_unit), by parity.
  auto keys = [&](int par) { return smem + C::kK + par * C::kSlot; };
  auto queries = [&](int par) { return smem + C::kQ + par * C::kSlot; };

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK;
  const int group = heads_v / heads_k;
  const int items = ws.chunks[0].x * heads_v;

  struct Item {
    int head, kh, nrows;
    int64_t t0;  // first stream row
  };
  // Loads an item's K, Q, g and beta into the buffers of parity par, asynchronously; one group.
  // Warp 0's lane l loads rows 2l, 2l + 1 of g and beta: it scans them without a barrier.
  auto prefetch = [&](int item, int par) {
    Item it;
    it.head = item % heads_v;
    it.kh = it.head / group;
    const int2 chunk = ws.chunks[1 + item / heads_v];
    it.nrows = min(kChunk, meta.node_length[chunk.x] - chunk.y);
    it.t0 = int64_t(meta.node_offset[chunk.x]) + chunk.y;
    if constexpr (C::kTma) {
      if (threadIdx.x == 0) {
        const uint32_t bar = bars + 8u * uint32_t(par);
        detail::bar_expect(bar, 2 * kChunk * DK * 2);
#pragma unroll
        for (int h = 0; h < DK / 64; ++h) {
          const uint32_t half = uint32_t(h * kChunk * 128);
          detail::tma_load(smem_u32(keys(par)) + half, &map_k, it.kh * DK + 64 * h, int(it.t0),
                           bar);
          detail::tma_load(smem_u32(queries(par)) + half, &map_q, it.kh * DK + 64 * h, int(it.t0),
                           bar);
        }
      }
    } else {
      const int64_t qk0 = it.t0 * qk_ld + it.kh * DK;
      load_tile<bf16, C::kVecK, C::kKp, kLdH>(reinterpret_cast<bf16*>(keys(par)), k + qk0, qk_ld,
                                              it.nrows, DK);
      load_tile<bf16, C::kVecK, C::kKp, kLdH>(reinterpret_cast<bf16*>(queries(par)), q + qk0, qk_ld,
                                              it.nrows, DK);
    }
    if (warp == 0) {
      float* gr = raw + par * 2 * kChunk;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 2 * lane + e;
        if (i < it.nrows) {
          cp_async<4>(gr + i, g + (it.t0 + i) * heads_v + it.head);
          cp_async<4>(gr + kChunk + i, beta + (it.t0 + i) * heads_v + it.head);
        } else {
          gr[i] = 0.f;
          gr[kChunk + i] = 0.f;
        }
      }
    }
    cp_async_commit();
    return it;
  };

  if constexpr (C::kTma) {
    if (threadIdx.x == 0) {
      detail::bar_init(bars, 1);
      detail::bar_init(bars + 8, 1);
      detail::bar_init_fence();
    }
    __syncthreads();
  }
  Item next{};
  if (int(blockIdx.x) < items) next = prefetch(blockIdx.x, 0);
  for (int item = blockIdx.x, iter = 0; item < items; item += gridDim.x, ++iter) {
    const Item cur = next;
    const int par = iter & 1;
    const uint32_t Ks = smem_u32(keys(par)), Qs = smem_u32(queries(par));
    const float* beta_s = raw + par * 2 * kChunk + kChunk;
    const int nrows = cur.nrows;
    const int64_t hrow = int64_t(cur.head) * T + cur.t0;  // workspace row of t0

    // gamma_i = gamma_{i-1} + g_i: lane l scans rows 2l, 2l + 1 (the pair sums by shuffles).
    // gam_s is free (every warp passed the previous item's last barrier).
    cp_async_wait<0>();
    if constexpr (C::kTma) detail::bar_wait(bars + 8u * uint32_t(par), uint32_t(iter >> 1) & 1u);
    if (warp == 0) {
      const float2 gg = *reinterpret_cast<const float2*>(raw + par * 2 * kChunk + 2 * lane);
      float incl = gg.x + gg.y;
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += y;
      }
      float base = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) base = 0.f;
      const float ga = base + gg.x, gb = ga + gg.y;
      *reinterpret_cast<float2*>(gam_s + 2 * lane) = make_float2(ga, gb);
      if (2 * lane < nrows) ws.gam[hrow + 2 * lane] = ga;
      if (2 * lane + 1 < nrows) ws.gam[hrow + 2 * lane + 1] = gb;
    }
    __syncthreads();  // K, Q, beta, gamma visible; every warp is done with the previous item

    // The next item's loads, into the buffers the previous item is done with.
    const int next_item = item + int(gridDim.x);
    if (next_item < items) next = prefetch(next_item, par ^ 1);

    // 16-row strips of the chunk with rows in it (its last chunk may be short: a question's
    // tail of a few rows): L, T and P of strips past them are neither computed nor read by
    // those below (row i of T, L and P depends only on rows <= i), nor stored.
    const int strips = (nrows + 15) / 16;

    // Phase B: K K^T -> Ls = -(beta_i k_i.k_j exp(gamma_i - gamma_j)) for j < i (0 elsewhere in
    // the computed tiles; nothing reads above the diagonal blocks).
    {
      const uint32_t run = uint32_t(kLRuns >> (8 * warp)) & 0xffu;
      const int mt = run & 3, nt0 = (run >> 2) & 7, n = mt < strips ? run >> 5 : 0;
      float acc[3][4];
      gram_tiles<3, C::kKp, DK>(acc, Ks, 16 * mt, Ks, 8 * nt0, n, lane);
#pragma unroll
      for (int s = 0; s < 3; ++s) {
        if (s >= n) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 16 * mt + g8 + 8 * h, j = 8 * (nt0 + s) + 2 * t4;
          const float gi = gam_s[i], bi = beta_s[i];
          float l[2];
#pragma unroll
          for (int e = 0; e < 2; ++e)
            l[e] = i < nrows && j + e < i ? -(bi * acc[s][2 * h + e] * __expf(gi - gam_s[j + e]))
                                          : 0.f;
          *reinterpret_cast<float2*>(Ls + i * kLdC + j) = make_float2(l[0], l[1]);
        }
      }
    }

    if (warp < 2) {
      bar_sync(1, kThreads);  // all of L

      // Diagonal blocks by forward substitution, lane: column c of block 2 warp + lane / 16.
      // T_rc = [r == c] + sum_{m<r} L_rm T_mc, summed from m = c up: the CPU's order.
      if (2 * warp < strips) {
        const int b0 = 32 * warp + (lane & 16), c = lane & 15;
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) {
          const float* lrow = Ls + (b0 + r) * kLdC + b0;
          float acc = 0.f;
#pragma unroll
          for (int m0 = 0; m0 < r; m0 += 4) {
            const float4 l4 = *reinterpret_cast<const float4*>(lrow + m0);
            const float l[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (m0 + e < r) acc = fmaf(l[e], x[m0 + e], acc);
          }
          x[r] = r == c ? 1.f : acc;
        }
        float* tcol = Ts + b0 * kLdC + b0 + (c & 8) + (c & 7) / 2 + 4 * (c & 1);
#pragma unroll
        for (int r = 0; r < 16; ++r) tcol[r * kLdC] = round_tf32(x[r]);
      }
      __syncwarp();

      // T_ba = T_bb (L_ba T_aa) computed as (T_bb L_ba) T_aa for a = 2 warp, b = a + 1: the
      // warp's own diagonal blocks.
      if (2 * warp + 1 < strips)
        inverse_block<2, kLdC>(Ts, Ls, 32 * warp + 16, 32 * warp, 2, lane, g8, t4);
      if (strips > 2) {   // block-uniform: both warps meet at the barrier or neither does
        bar_sync(2, 64);  // both halves' diagonal 32x32 blocks of T

        // T[r0:r0+16, 0:32] = (T[r0:r0+16, 32:64] L[32:64, 0:32]) T[0:32, 0:32], r0 = 32 + 16
        // warp; T is zero right of the row strip's diagonal block.
        if (2 + warp < strips)
          inverse_block<4, kLdC>(Ts, Ls, 32 + 16 * warp, 0, 2 * warp + 2, lane, g8, t4);
      }
    } else {
      bar_arrive(1, kThreads);

      // Q K^T -> P = scale q_i.k_j exp(gamma_i - gamma_j) for j <= i, 0 above (workspace).
      const uint32_t run = uint32_t(kPRuns >> (8 * (warp - 2))) & 0xffu;
      const int mt = run & 3, nt0 = (run >> 2) & 7, n = mt < strips ? run >> 5 : 0;
      float acc[4][4];
      gram_tiles<4, C::kKp, DK>(acc, Qs, 16 * mt, Ks, 8 * nt0, n, lane);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 16 * mt + g8 + 8 * h;
        if (i >= nrows) continue;
        const float gi = gam_s[i];
        bf16* prow = ws.P + (hrow + i) * kChunk;
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          if (s >= n) continue;
          const int j = 8 * (nt0 + s) + 2 * t4;
          float p[2];
#pragma unroll
          for (int e = 0; e < 2; ++e)
            p[e] = j + e <= i ? scale * acc[s][2 * h + e] * __expf(gi - gam_s[j + e]) : 0.f;
          *reinterpret_cast<uint32_t*>(prow + j) = pack_bf16(p[0], p[1]);
        }
        if (nt0 + n == 2 * mt + 2)
          for (int j = 8 * (nt0 + n) + 2 * t4; j < kChunk; j += 8)
            *reinterpret_cast<uint32_t*>(prow + j) = 0u;
      }
    }
    __syncthreads();  // T complete

    // Phase E: T to the workspace, four natural columns a thread; column 2t + h of an 8-column
    // group sits at position t + 4 h in shared memory. Zero above the diagonal (not computed).
    for (int e = int(threadIdx.x); e < kChunk * kChunk / 4; e += kThreads) {
      const int i = e / (kChunk / 4), j = 4 * (e % (kChunk / 4));
      if (i >= nrows) continue;
      const float* trow = Ts + i * kLdC + (j & ~7) + ((j & 7) >> 1);
      float t[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) t[c] = j + c <= i ? trow[(c >> 1) + 4 * (c & 1)] : 0.f;
      *reinterpret_cast<uint2*>(ws.T + (hrow + i) * kChunk + j) =
          make_uint2(pack_bf16(t[0], t[1]), pack_bf16(t[2], t[3]));
    }
  }
}

}  // namespace

cudaError_t launch_plan(const GdnArgs& a) {
  gdn_plan_kernel<<<1, kPlanThreads, 0, a.stream>>>(a.ws.chunks, a.level, a.meta);
  return cudaGetLastError();
}

template <int DK, int DV>
cudaError_t launch_prepare(const GdnArgs& a) {
  // Two resident blocks per SM, each walking its items with the next one's loads in flight.
  const int blocks = stride_grid(max_level_chunks(a.meta) * a.heads_v, a.sms, 2);
  CUtensorMap map_q{}, map_k{};  // unused (zeros) where K and Q go by cp.async
  if constexpr (PrepCfg<DK, DV>::kTma) {
    const int64_t cols = int64_t(a.heads_k) * DK;
    cudaError_t err = detail::tile_map(map_q, a.q, a.meta.n_tokens, cols, kChunk);
    if (err == cudaSuccess) err = detail::tile_map(map_k, a.k, a.meta.n_tokens, cols, kChunk);
    if (err != cudaSuccess) return err;
  }
  return launch_with_smem<gdn_prepare_kernel<DK, DV>, PrepCfg<DK, DV>::kBytes>(
      blocks, a.stream, map_q, map_k, a.q, a.k, a.g, a.beta, a.ws, a.heads_k, a.heads_v, a.scale,
      a.meta);
}

#define FLIDE_GDN_INSTANTIATE(DK, DV) template cudaError_t launch_prepare<DK, DV>(const GdnArgs&);
FLIDE_GDN_SHAPES(FLIDE_GDN_INSTANTIATE)
#undef FLIDE_GDN_INSTANTIATE

}  // namespace flide::kernels::gdn_detail
