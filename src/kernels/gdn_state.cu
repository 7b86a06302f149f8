// The chunked delta rule's sequential half and its output (gdn.h): one block per (node, value
// head, 64 of its value columns) walks the node's chunks in order with the state in registers,
// transposed: a warpgroup holds S^T (64 value columns x 128 keys, fp32) as wgmma accumulators.
// Per chunk, from the state entering it (b_j = beta_j exp(gamma_j)):
//   Z^T = S^T K^T, O^T = S^T q^T                               8 + 8 k-steps over the keys
//   Y^T = beta V^T - Z^T diag(b), v_new^T = Y^T T^T            4 k-steps over the chunk
//                                                              (fla's U - W S, in T's factors)
//   out^T = Dk^-1/2 exp(gamma) O^T + v_new^T P^T               4 (to bf16 out)
//   S^T = exp(gamma_last) S^T + (v_new f)^T K                  4 k-steps x 2 key halves,
//                                                              f_j = exp(gamma_last - gamma_j)
// Each product is a few m64n64k16 wgmma with A from registers (S^T, Y^T, v_new^T, (v_new f)^T:
// an accumulator pair is an A fragment as it stands, acc_pair_as_a) and the tensor cores reading
// K, q, T and P straight from shared memory (K also MN-major, for the state update). So neither
// the state nor v_new ever leaves the registers. Applying T here instead of reading W = T (b K)
// and U = T (beta V) from the prepare kernel moves 64 instead of 2 (Dk + Dv) values per chunk row.
//
// Why wgmma: on mma.sync each warp of a 16-column slab issued ~1,130 instructions a chunk (HMMA a
// tenth of them; the rest addressed fragments, loaded them through ldmatrix and counted loops),
// one warp per scheduler, so a chunk was a chain of issue slots
// (bench/results/2026-11-30-state-loaders.md, 2026-11-30-gdn-wgmma.md). For the same reason a
// second warpgroup stages the chunks ahead (issued by the computing warps, the copies were a third
// of their chain), and the output leaves through shared memory (stmatrix, transposed) in row
// units instead of 32 scattered 2-byte stores a thread.
//
// Head dims up to 128 (Dk = Dv = 128 in every Qwen3.5 size; test checkpoints have 8 to 24): keys
// past Dk are zero columns of the staged q and K (written once, never copied over), value columns
// past Dv are zero columns of V and are never written back. So small heads run the same code,
// on mostly zero tiles.
//
// Precision: every product takes bf16 operands with fp32 sums, its fp32 operand rounded to bf16 as
// it enters; the state itself stays fp32. That is the rounding fla's chunked kernels apply (the
// state, v_new and the chunk's factors cast to the inputs' dtype for their products), i.e. what
// HF transformers and vLLM compute on the GPU. Carrying the state's operand to 16 bits instead (a
// high and a low bf16 part, two products each) cost 1.3-2.3% of a QuALITY round and came no
// measurably closer to float32, whose distance bf16 rounding elsewhere dominates
// (bench/results/2026-11-30-gemm-tuning-graphs.md). One fixed order of every sum, whatever the
// level's width: a node's bits do not depend on which other nodes share its level.
//
// Shared memory: three stages, so that a chunk's loads are issued two chunks ahead (one ahead,
// the computing warpgroup waited for them at a third of its barriers and a step took ~2 us,
// twice its products' time). Per stage (1024-byte aligned; wgmma.cuh's 128-byte swizzle):
// T and P [64 i][64 j] (8 KB each), q and K [64 rows][128 keys] as two 64-key chunks (16 KB
// each), then V [64][72] (the block's value columns, padded as the elementwise reads want), gamma
// and beta. Chunk rows past a node's end are zeros (T, P, q, K, V, gamma, beta) and f = b = 0
// there: they change neither the real rows' outputs nor the state, and they are never written.
#include "kernels/gdn_chunk.cuh"
#include "kernels/wgmma.cuh"

namespace flide::kernels::gdn_detail {
namespace {

constexpr int kD = 128;    // keys of the staged q and K (Dk padded), value columns of two halves
constexpr int kCols = 64;  // value columns of a block: one warpgroup's m64
constexpr int kGroupThreads = 128;                // a warpgroup
constexpr int kBlockThreads = 2 * kGroupThreads;  // the computing warpgroup, then the staging one
constexpr int kRowTiles = kChunk / 8;             // n8 tiles of a chunk's rows
constexpr int kKeySteps = kD / 16;                // k16 steps over the keys
constexpr int kRowSteps = kChunk / 16;            // k16 steps over a chunk's rows
constexpr int kLdV = kCols + 8;                   // bf16: 36 words a row, 4 mod 32
constexpr int kLdOut = kCols + 8;                 // the same for the output tile
constexpr uint32_t kKeyChunk = kChunk * 128;      // bytes of 64 keys of q or K (one swizzle chunk)
constexpr int kStages = 3;                        // chunks staged ahead of the one computed: 2
constexpr int kComputeBarrier = 1;                // named barrier of the computing warpgroup alone
static_assert(kBlockThreads == kThreads, "launch_with_smem launches kThreads a block");
// Blocks a head's value columns take, kCols each.
template <int DV>
constexpr int kHalves = (DV + kCols - 1) / kCols;

constexpr uint32_t kStT = 0;
constexpr uint32_t kStP = kStT + kChunk * kChunk * 2;
constexpr uint32_t kStQ = kStP + kChunk * kChunk * 2;
constexpr uint32_t kStK = kStQ + kChunk * kD * 2;
constexpr uint32_t kStV = kStK + kChunk * kD * 2;
constexpr uint32_t kStGam = kStV + kChunk * kLdV * 2;
constexpr uint32_t kStBeta = kStGam + kChunk * 4;
constexpr uint32_t kStage = (kStBeta + kChunk * 4 + 1023) / 1024 * 1024;
constexpr uint32_t kOut = kStages * kStage;  // [64 rows][kLdOut] bf16: a chunk's output
constexpr uint32_t kFactors = kOut + kChunk * kLdOut * 2;  // [64] scale exp(gamma_j), f_j, b_j
constexpr int kSmemBytes = 1024 + int(kFactors) + 3 * kChunk * 4;
static_assert(kSmemBytes <= 227 * 1024, "shared memory");

// Rows r < nrows of src (row stride ld) into a swizzled [64][kC] bf16 tile at `tile`,
// asynchronously, by the staging warpgroup (tid in [0, 128)); rows past nrows are zeros. A thread
// copies one 16-byte column unit of every kStep-th row: its rows share their swizzle phase (kStep
// is a multiple of 8), so only the row advances.
template <int kC>
__device__ __forceinline__ void stage_swizzled(uint32_t tile, const bf16* src, int64_t ld,
                                               int nrows, int tid) {
  constexpr int kVecs = kC / 8;
  constexpr int kStep = kGroupThreads / kVecs;
  static_assert(kStep % 8 == 0 && kChunk % kStep == 0, "rows of one swizzle phase");
  const int r0 = tid / kVecs, c = tid % kVecs * 8;
  const uint32_t dst = wgmma::swizzled(tile, kChunk, r0, c);
  const bf16* row0 = src + c;  // a valid address for the zero fills
  src = row0 + int64_t(r0) * ld;
#pragma unroll
  for (int i = 0; i < kChunk / kStep; ++i) {
    const bool in = r0 + i * kStep < nrows;
    detail::cp_async16(dst + uint32_t(i * kStep * 128), in ? src + int64_t(i * kStep) * ld : row0,
                       in ? 16 : 0);
  }
}

// Dk (< 128) key columns of rows r < nrows of src into a swizzled [64][128] q or K tile in vectors
// of kVec, by the staging warpgroup; rows past nrows are zeros. Keys past Dk keep the zeros
// written at the kernel's start.
template <int DK, int kVec>
__device__ __forceinline__ void stage_keys(unsigned char* smem, uint32_t base, uint32_t tile,
                                           const bf16* src, int64_t ld, int nrows, int tid) {
  constexpr int kVecs = DK / kVec;
  for (int idx = tid; idx < kChunk * kVecs; idx += kGroupThreads) {
    const int r = idx / kVecs, c = idx % kVecs * kVec;
    const uint32_t at = wgmma::swizzled(tile, kChunk, r, c & ~7) + (c & 7) * 2;
    stage_vector<bf16, kVec>(reinterpret_cast<bf16*>(smem + (at - base)), src + int64_t(r) * ld + c,
                             r < nrows);
  }
}

__device__ __forceinline__ uint64_t k_major(uint32_t addr) {
  return wgmma::descriptor(addr, 16, 1024);
}

// Grid-stride loop over items = (node * Hv + head) * halves + half: a block serves 64 of a head's
// value columns (two halves for Dv = 128). Warpgroup 0 computes; warpgroup 1 stages chunk ci + 2
// while chunk ci is computed (its copies cost the computing warps nothing), and both meet once a
// chunk, where stage ci has landed and chunk ci - 1 is done with the stage ci + 2 takes.
template <int DK, int DV>
__global__ void __launch_bounds__(kBlockThreads, 1)
    gdn_state_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                     const bf16* __restrict__ v, const float* __restrict__ beta, float* state,
                     bf16* __restrict__ out, Workspace ws, int heads_k, int heads_v, int level,
                     float scale, TreeMeta meta) {
  static_assert(DK <= kD && DV <= kD, "a head fits the tiles");
  using D = Dims<DK, DV>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  float* ef = reinterpret_cast<float*>(smem + kFactors);  // [64] scale exp(gamma_j)
  float* fj = ef + kChunk;                                // [64] exp(gamma_last - gamma_j)
  float* bj = fj + kChunk;                                // [64] beta_j exp(gamma_j)

  // The role, broadcast from lane 0 so that the compiler sees it warp-uniform (else it
  // serialises every wgmma of the computing branch).
  const bool stager = __shfl_sync(0xffffffffu, int(threadIdx.x) / kGroupThreads, 0) == 1;
  const int tid = int(threadIdx.x) % kGroupThreads, lane = tid & 31, warp = tid >> 5,
            g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK;
  const int64_t state_ld = int64_t(heads_v) * DK * DV, out_ld = int64_t(heads_v) * DV;
  const int group = heads_v / heads_k;
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  const int items = (ne - nb) * heads_v * kHalves<DV>;
  // Element e of an accumulator tile: row value_col(e) of the block's columns, column
  // tile_col(t, e) of tile t (a key, or a chunk row).
  const int value_col0 = 16 * warp + g8;
  auto value_col = [&](int e) { return value_col0 + 8 * (e >> 1); };
  auto tile_col = [&](int t, int e) { return 8 * t + 2 * t4 + (e & 1); };
  // stmatrix row addresses into the output tile: lane 8 m + r stores row r of matrix m, i.e.
  // chunk row 8 (m / 2) + r (of an n8 pair) at value columns 16 warp + 8 (m % 2).
  const uint32_t out_tile = base + kOut;
  const uint32_t out_lane =
      out_tile +
      uint32_t(((lane >> 4) * 8 + (lane & 7)) * kLdOut + 16 * warp + ((lane >> 3) & 1) * 8) * 2u;

  if constexpr (DK < kD) {  // the keys past Dk of every stage's q and K: zero once, for good
    for (int i = int(threadIdx.x); i < kStages * 2 * kChunk * kD / 8; i += kBlockThreads) {
      const int tile = i / (kChunk * kD / 8), unit = i % (kChunk * kD / 8);
      const uint32_t st = uint32_t(tile >> 1) * kStage + (tile & 1 ? kStK : kStQ);
      *reinterpret_cast<uint4*>(smem + st + unit * 16) = make_uint4(0u, 0u, 0u, 0u);
    }
    wgmma::fence_async_shared();  // for wgmma's reads, after the next barrier
  }

  // An item's place in the stream, state and workspace.
  struct Item {
    int head, kh, v0, vcols, len, slot_in, slot_out, n_chunks;
    int64_t off, state_head, hrow;
  };
  auto item_at = [&](int item) {
    Item it;
    it.head = (item / kHalves<DV>) % heads_v;
    const int node = nb + item / kHalves<DV> / heads_v;
    it.kh = it.head / group;
    it.v0 = item % kHalves<DV> * kCols;
    it.vcols = min(kCols, DV - it.v0);
    it.off = meta.node_offset[node];
    it.len = meta.node_length[node];
    it.slot_in = meta.node_slot_in[node];
    it.slot_out = meta.node_slot_out[node];
    it.state_head = int64_t(it.head) * DK * DV + it.v0;
    it.hrow = int64_t(it.head) * T + it.off;  // workspace row of the node's first row
    it.n_chunks = (it.len + kChunk - 1) / kChunk;
    return it;
  };

  // The block's items' chunks form one sequence of steps, step s staged in stage s % 3: the next
  // item's first chunks stage while this item's last ones are computed. Both warpgroups meet once a
  // step, where its stage has landed and the step before is done with the stage step + 2 takes.
  __syncthreads();  // the zeros are written
  if (stager) {
    auto issue = [&](const Item& it, int ci, uint32_t step) {
      const uint32_t st = base + step % kStages * kStage;
      unsigned char* sp = smem + (st - base);  // the same stage, as a pointer
      const int c0 = ci * kChunk, nrows = min(kChunk, it.len - c0);
      const int64_t t0 = it.off + c0;
      stage_swizzled<kChunk>(st + kStT, ws.T + (it.hrow + c0) * kChunk, kChunk, nrows, tid);
      stage_swizzled<kChunk>(st + kStP, ws.P + (it.hrow + c0) * kChunk, kChunk, nrows, tid);
      const bf16* qs = q + t0 * qk_ld + it.kh * DK;
      const bf16* ks = k + t0 * qk_ld + it.kh * DK;
      if constexpr (DK == kD) {
        stage_swizzled<kD>(st + kStQ, qs, qk_ld, nrows, tid);
        stage_swizzled<kD>(st + kStK, ks, qk_ld, nrows, tid);
      } else {
        stage_keys<DK, D::kVecK>(smem, base, st + kStQ, qs, qk_ld, nrows, tid);
        stage_keys<DK, D::kVecK>(smem, base, st + kStK, ks, qk_ld, nrows, tid);
      }
      load_rows<bf16, D::kVecV, kLdV>(reinterpret_cast<bf16*>(sp + kStV),
                                      v + t0 * out_ld + int64_t(it.head) * DV + it.v0, out_ld,
                                      nrows, it.vcols, kCols / D::kVecV, tid, kGroupThreads);
      if (tid < kChunk) {
        stage_vector<float, 1>(reinterpret_cast<float*>(sp + kStGam) + tid,
                               ws.gam + it.hrow + c0 + tid, tid < nrows);
        stage_vector<float, 1>(reinterpret_cast<float*>(sp + kStBeta) + tid,
                               beta + (t0 + tid) * heads_v + it.head, tid < nrows);
      }
    };
    // The cursor: the next chunk to stage, ci of the block's item `item` (item >= items: none).
    int item = blockIdx.x, ci = 0;
    Item it{};
    auto settle = [&]() {  // the first item with chunks at or after `item`, into it
      for (; item < items; item += gridDim.x) {
        it = item_at(item);
        if (it.n_chunks > 0) return;
      }
    };
    // Stages the cursor's chunk as step `step` and moves the cursor on; every call commits one
    // group of copies (empty past the last chunk), so that waiting for all but the newest group
    // waits for exactly the step about to be computed. Returns whether there was a chunk.
    auto stage_next = [&](uint32_t step) {
      const bool any = item < items;
      if (any) {
        issue(it, ci, step);
        if (++ci == it.n_chunks) {
          item += gridDim.x;
          ci = 0;
          settle();
        }
      }
      cp_async_commit();
      return any;
    };
    settle();
    int pending = int(stage_next(0)) + int(stage_next(1));  // staged, not yet computed
    for (uint32_t step = 0; pending > 0; ++step, --pending) {
      cp_async_wait<1>();
      wgmma::fence_async_shared();
      __syncthreads();  // this step's stage landed; step - 1 is done with stage (step + 2) % 3
      pending += int(stage_next(step + 2));
    }
    return;
  }

  uint32_t step = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const Item it = item_at(item);

    // S^T over the 128 keys: two m64n64 accumulators, key tile kt in s[kt / 8][kt % 8].
    float s[2][8][4];
#pragma unroll
    for (int kt = 0; kt < 2 * 8; ++kt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = tile_col(kt, e), vc = value_col(e);
        s[kt >> 3][kt & 7][e] =
            it.slot_in >= 0 && c < DK && vc < it.vcols
                ? state[it.slot_in * state_ld + it.state_head + int64_t(c) * DV + vc]
                : 0.f;
      }

    for (int ci = 0; ci < it.n_chunks; ++ci, ++step) {
      const uint32_t st = base + step % kStages * kStage;
      unsigned char* sp = smem + (st - base);  // the same stage, as a pointer
      const bf16* sV = reinterpret_cast<const bf16*>(sp + kStV);
      const float* sgam = reinterpret_cast<const float*>(sp + kStGam);
      const float* sbeta = reinterpret_cast<const float*>(sp + kStBeta);
      const int c0 = ci * kChunk, nrows = min(kChunk, it.len - c0);
      __syncthreads();  // this step's stage landed (the stager's wait and fence came first)

      // Z^T = S^T K^T and O^T = S^T q^T (two commit groups), in flight while the factors are
      // formed.
      float z[kRowTiles][4], o[kRowTiles][4];
      {
        uint32_t a[kKeySteps][4];
#pragma unroll
        for (int ks = 0; ks < kKeySteps; ++ks)
          acc_pair_as_a(a[ks], s[ks >> 2][(2 * ks) & 7], s[ks >> 2][(2 * ks + 1) & 7]);
        wgmma::fence();
#pragma unroll
        for (int ks = 0; ks < kKeySteps; ++ks)
          wgmma::mma_rs<false>(z, a[ks], k_major(st + kStK + (ks >> 2) * kKeyChunk + (ks & 3) * 32),
                               ks > 0);
        wgmma::commit();
#pragma unroll
        for (int ks = 0; ks < kKeySteps; ++ks)
          wgmma::mma_rs<false>(o, a[ks], k_major(st + kStQ + (ks >> 2) * kKeyChunk + (ks & 3) * 32),
                               ks > 0);
        wgmma::commit();
      }
      const float gam_last = sgam[nrows - 1];
      if (tid < kChunk) {
        const float e = __expf(sgam[tid]);
        ef[tid] = scale * e;
        fj[tid] = tid < nrows ? __expf(gam_last - sgam[tid]) : 0.f;
        bj[tid] = sbeta[tid] * e;
      }
      wgmma::wait<1>();                          // Z^T; O^T may still run
      bar_sync(kComputeBarrier, kGroupThreads);  // the factors

      // Y^T = beta V^T - Z^T diag(b), then v_new^T = Y^T T^T (into z).
      {
        uint32_t a[kRowSteps][4];
#pragma unroll
        for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = tile_col(nt, e);
            z[nt][e] = sbeta[j] * __bfloat162float(sV[j * kLdV + value_col(e)]) - bj[j] * z[nt][e];
          }
#pragma unroll
        for (int js = 0; js < kRowSteps; ++js) acc_pair_as_a(a[js], z[2 * js], z[2 * js + 1]);
        wgmma::fence();
#pragma unroll
        for (int js = 0; js < kRowSteps; ++js)
          wgmma::mma_rs<false>(z, a[js], k_major(st + kStT + js * 32), js > 0);
        wgmma::commit();
        wgmma::wait<0>();
      }

      // out^T = scale exp(gamma) O^T + v_new^T P^T, and S^T = exp(gamma_last) S^T + (v_new f)^T K
      // (a leaf's final state is not kept).
      const bool update = ci + 1 < it.n_chunks || it.slot_out >= 0;
      {
        uint32_t a_v[kRowSteps][4], a_f[kRowSteps][4];
#pragma unroll
        for (int js = 0; js < kRowSteps; ++js) acc_pair_as_a(a_v[js], z[2 * js], z[2 * js + 1]);
#pragma unroll
        for (int nt = 0; nt < kRowTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = tile_col(nt, e);
            o[nt][e] *= ef[j];
            z[nt][e] *= fj[j];
          }
#pragma unroll
        for (int js = 0; js < kRowSteps; ++js) acc_pair_as_a(a_f[js], z[2 * js], z[2 * js + 1]);
        const float decay = __expf(gam_last);
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
          for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[c][nt][e] *= decay;
        wgmma::fence();
#pragma unroll
        for (int js = 0; js < kRowSteps; ++js)
          wgmma::mma_rs<false>(o, a_v[js], k_major(st + kStP + js * 32), true);
        if (update)
#pragma unroll
          for (int js = 0; js < kRowSteps; ++js)
#pragma unroll
            for (int c = 0; c < 2; ++c)
              wgmma::mma_rs<true>(
                  s[c], a_f[js],
                  wgmma::descriptor(st + kStK + c * kKeyChunk + js * 16 * 128, kKeyChunk, 1024),
                  true);
        wgmma::commit();
        wgmma::wait<0>();
      }

      // The output: transposed into the output tile by stmatrix (rows of the chunk, the block's
      // columns), then written in row units of 8 columns (of 1 where Dv is no multiple of 8).
#pragma unroll
      for (int nt = 0; nt < kRowTiles; nt += 2) {
        uint32_t r[4];
        acc_pair_as_a(r, o[nt], o[nt + 1]);
        detail::stsm_x4_trans(out_lane + uint32_t(8 * nt * kLdOut * 2), r);
      }
      bar_sync(kComputeBarrier, kGroupThreads);
      bf16* orows = out + (it.off + c0) * out_ld + int64_t(it.head) * DV + it.v0;
      const bf16* tile = reinterpret_cast<const bf16*>(smem + kOut);
      if constexpr (DV % 8 == 0) {
        const int unit = tid & 7;
#pragma unroll
        for (int r = tid >> 3; r < kChunk; r += kGroupThreads / 8)
          if (r < nrows && unit * 8 < it.vcols)
            *reinterpret_cast<uint4*>(orows + r * out_ld + unit * 8) =
                *reinterpret_cast<const uint4*>(tile + r * kLdOut + unit * 8);
      } else {
        for (int i = tid; i < nrows * it.vcols; i += kGroupThreads)
          orows[i / it.vcols * out_ld + i % it.vcols] = tile[i / it.vcols * kLdOut + i % it.vcols];
      }
    }

    // Final state: each thread writes exactly the elements it read, so slot_out may be slot_in.
    if (it.slot_out >= 0) {
#pragma unroll
      for (int kt = 0; kt < 2 * 8; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = tile_col(kt, e), vc = value_col(e);
          if (c < DK && vc < it.vcols)
            state[it.slot_out * state_ld + it.state_head + int64_t(c) * DV + vc] =
                s[kt >> 3][kt & 7][e];
        }
    }
  }
}

}  // namespace

template <int DK, int DV>
cudaError_t launch_state(const GdnArgs& a) {
  const int blocks =
      stride_grid(int64_t(a.meta.max_level_nodes) * a.heads_v * kHalves<DV>, a.sms, 1);
  return launch_with_smem<gdn_state_kernel<DK, DV>, kSmemBytes>(
      blocks, a.stream, a.q, a.k, a.v, a.beta, a.state, a.out, a.ws, a.heads_k, a.heads_v, a.level,
      a.scale, a.meta);
}

#define FLIDE_GDN_INSTANTIATE(DK, DV) template cudaError_t launch_state<DK, DV>(const GdnArgs&);
FLIDE_GDN_SHAPES(FLIDE_GDN_INSTANTIATE)
#undef FLIDE_GDN_INSTANTIATE

}  // namespace flide::kernels::gdn_detail
