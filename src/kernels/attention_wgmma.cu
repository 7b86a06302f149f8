// Tree attention for head dim 256 on Hopper warpgroup MMA. The same plan, grid, key-block order,
// masks and online softmax as the mma.sync kernel (attention.cu), and the same numerics (bf16
// products, fp32 accumulation, P rounded to bf16); the two products move to wgmma, and the walk
// keeps a block's P V in flight into the next block, its stages handed on by barriers (below).
//
// Why: at hd 256 the mma.sync kernel's eight warps each read the whole K and V block from shared
// memory through ldmatrix, so shared-memory bandwidth caps it near 280 TFLOP/s. Here each
// warpgroup (4 warps, 64 packed rows) issues S = Q K^T with both operands read by the tensor
// cores straight from shared memory, and O += P V as m64n256k16 (the whole head dim) with P from
// registers (the softmax's own fragments) and V from shared memory: K and V are read once per 64
// rows instead of once per 16.
//
// Key blocks of kBN = 80 keys (the mma.sync kernel's are kN = 64): S is one m64n80k16 a k-step,
// so each 64-row k-step of Q, read from shared memory once per product, serves 80 keys instead of
// 64, and a block's fixed costs (its barriers, the softmax's reductions, the rescale) are spread
// over 25% more keys; a 70-token question fits one own block instead of two.
//
// Shared memory (1024-byte aligned, wgmma.cuh's 128-byte swizzle): Q [kM rows][256] (64 KB),
// then two stages of K and V [kBN keys][256] (40 KB each), then the row table and the stages'
// barriers: 232,224 of the 232,448 bytes a block may have. Q and K are read K-major (k = the head
// dim, contiguous), V MN-major (n = the head dim, contiguous).
#include <type_traits>

#include "kernels/attention_tile.cuh"
#include "kernels/launch.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

namespace flide::kernels::attention_detail {
namespace {

constexpr int kHd = 256;
constexpr int kBN = 80;                                       // keys a block
constexpr uint32_t kQBytes = kM * kHd * 2;                    // 64 KB
constexpr uint32_t kKVBytes = kBN * kHd * 2;                  // 40 KB: K or V of one stage
constexpr uint32_t kStageBytes = 2 * kKVBytes;                // K then V
constexpr uint32_t kQChunk = kM * 128, kKVChunk = kBN * 128;  // bytes of one 64-column chunk
static_assert(kKVChunk % 1024 == 0 && kBN % 16 == 0, "swizzle atoms; k16 steps of P V");
// After the row table: each stage's full barrier (its copies have landed) and empty barrier
// (every thread is done with it).
constexpr size_t kBarrierBytes = 4 * sizeof(uint64_t);
constexpr size_t kSmemBytes = 1024 + kQBytes + 2 * kStageBytes + RowTable::kBytes + kBarrierBytes;
static_assert(kM == 128 && kThreads == 256, "two warpgroups of 64 packed rows");
static_assert(kSmemBytes <= 232448, "a block's shared memory on sm_90");

// kSplit: the keys split over CTAs (AttentionSplit), an instantiation of its own so that the
// walk's split state takes no registers from the unsplit kernel.
template <bool kSplit>
__global__ void __launch_bounds__(kThreads, 1)
    tree_attention_wgmma_kernel(const Params p, const SplitParams sp,
                                const __grid_constant__ CUtensorMap map_k,
                                const __grid_constant__ CUtensorMap map_v) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  const uint32_t sQ = base, sKV = base + kQBytes;
  int* table = reinterpret_cast<int*>(smem + kQBytes + 2 * kStageBytes);
  const RowTable rows = RowTable::carve(table);
  const uint32_t bars = smem_u32(table) + uint32_t(RowTable::kBytes);
  auto full = [&](int stage) { return bars + 8u * uint32_t(stage); };
  auto empty = [&](int stage) { return bars + 16u + 8u * uint32_t(stage); };

  int kvh = 0, parent = -1, split = 0;
  if (!load_row_table(p, rows, kvh, parent, split, kSplit ? sp.n_dense + sp.n_own : 1)) return;
  if (threadIdx.x == 0) {
    for (int st = 0; st < 2; ++st) {
      detail::bar_init(full(st), 1);
      detail::bar_init(empty(st), kThreads);
    }
    detail::bar_init_fence();
  }
  __syncthreads();
  const int tid = int(threadIdx.x);
  load_q_rows<kHd>(p, rows, tid, [&](int m, int c) { return wgmma::swizzled(sQ, kM, m, c); });
  const int warp = tid / 32, lane = tid % 32, quad_t = lane & 3;
  RowPair rp(rows, warp, lane);
  const uint32_t q_rows = sQ + uint32_t(warp / 4) * 64 * 128;  // the warpgroup's 64 rows

  // O is first written by block 0's P V (scale-d 0), not zeroed here: zeros stored before the
  // walk meet, at the loop's head, the P V the previous block leaves in flight, and ptxas then
  // serializes every wgmma. (Block 0's rescale reads it unset; the P V that follows discards
  // what it made.)
  float o[kHd / 8][4];

  // A stage: K then V, each [kBN keys][kHd] swizzled, as eight bulk tensor copies of [kBN][64]
  // issued by thread 0. Keys past the block's end are whatever rows follow (finite: every
  // stream row has its K and V, and a padding row's come from a finite residual, stream.h), or
  // zeros past the stream's end; the mask gives them P = 0.
  auto load_stage = [&](int stage, const KeyBlock& b) {
    const uint32_t at = sKV + stage * kStageBytes;
    detail::bar_expect(full(stage), kStageBytes);
#pragma unroll
    for (int c = 0; c < kHd / 64; ++c) {
      detail::tma_load(at + c * kKVChunk, &map_k, kvh * kHd + 64 * c, b.kb, full(stage));
      detail::tma_load(at + kKVBytes + c * kKVChunk, &map_v, kvh * kHd + 64 * c, b.kb, full(stage));
    }
  };

  // The walk over two K/V stages, handed between the threads by barriers a stage (not one
  // barrier a block for the CTA, which kept the two warpgroups in step, so that one's softmax
  // never ran beside the other's products): a stage is full once its bytes have landed, and
  // empty once every thread has retired the products that read it. Block b's O += P V stays in
  // flight until block b + 1's S has been issued behind it; block b + 1's copies go out right
  // behind block b's S, once block b - 1's stage is empty.
  Cursor cur = path_cursor(p, parent);
  SplitWalk walk;
  if constexpr (kSplit) walk = split_walk<kBN>(p, sp, parent, split);
  KeyBlock blk;
  bool have;
  if constexpr (kSplit)
    have = next_split_block<kBN>(cur, p, rows.lo, rows.hi, walk, blk);
  else
    have = next_block<kBN>(cur, p, rows.lo, rows.hi, blk);
  if (have && tid == 0) load_stage(0, blk);
  cp_async_commit();  // Q
  cp_async_wait<0>();
  wgmma::fence_async_shared();
  __syncthreads();  // Q, for every thread
  bool first = true;
  for (int b = 0, stage = 0; have; ++b, stage ^= 1) {
    detail::bar_wait(full(stage), uint32_t(b >> 1) & 1u);
    const uint32_t sK = sKV + stage * kStageBytes, sV = sK + kKVBytes;

    // S = Q K^T: 16 k-steps of the head dim, 4 per 64-column chunk.
    float s[kBN / 8][4];
    const auto s_step = [&](auto accumulate, int ks) {
      const uint32_t k_off = uint32_t(ks & 3) * 32;
      wgmma::mma_ss_n80<decltype(accumulate)::value>(
          s, wgmma::descriptor(q_rows + (ks >> 2) * kQChunk + k_off, 16, 1024),
          wgmma::descriptor(sK + (ks >> 2) * kKVChunk + k_off, 16, 1024));
    };
    wgmma::fence();
    s_step(std::false_type{}, 0);
#pragma unroll
    for (int ks = 1; ks < kHd / 16; ++ks) s_step(std::true_type{}, ks);
    wgmma::commit();
    // S queues behind block b - 1's P V on the tensor cores (no drain between the two); once
    // that P V has retired, its stage is handed back.
    if (b > 0) {
      wgmma::wait<1>();
      detail::bar_arrive(empty(stage ^ 1));
    }
    // The next block's copies go out while the tensor cores make S.
    KeyBlock next;
    bool have_next;
    if constexpr (kSplit)
      have_next = next_split_block<kBN>(cur, p, rows.lo, rows.hi, walk, next);
    else
      have_next = next_block<kBN>(cur, p, rows.lo, rows.hi, next);
    if (have_next && tid == 0) {
      if (b > 0) detail::bar_wait(empty(stage ^ 1), uint32_t((b - 1) >> 1) & 1u);
      load_stage(stage ^ 1, next);
    }
    wgmma::wait<0>();

    rescale(o, softmax_block(s, rp, blk, p.scale_log2, quad_t));
    // O += P V: 5 k-steps of the block's keys, each one m64n256k16 over the whole head dim (V's
    // four 64-column chunks kKVChunk apart).
    // P's fragments are packed first: registers wgmma reads must not be written between fence
    // and commit (nor, since the wait comes a block later, before it: a is not touched again
    // until then).
    uint32_t a[kBN / 16][4];
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks) p_fragment(a[ks], s, ks);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks)
      wgmma::mma_rs_n256_t(o, a[ks], wgmma::descriptor(sV + ks * 16 * 128, kKVChunk, 1024),
                           !first || ks > 0);
    wgmma::commit();
    first = false;
    blk = next;
    have = have_next;
  }
  wgmma::wait<0>();
  if (first)  // no key block (unsplit, every row sees at least itself: only a split CTA's share)
#pragma unroll
    for (int dn = 0; dn < kHd / 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.f;
  if constexpr (kSplit)
    store_partial<kHd>(o, rp, rows, p, sp, quad_t, split);
  else
    store_rows<kHd>(o, rp, rows, p, quad_t);
}

template <bool kSplit>
cudaError_t launch_as(const Params& p, const SplitParams& sp, int64_t n_tokens, unsigned grid,
                      cudaStream_t stream) {
  cudaError_t err =
      detail::raise_smem_limit<tree_attention_wgmma_kernel<kSplit>, int(kSmemBytes)>();
  CUtensorMap map_k, map_v;
  const int64_t cols = int64_t(p.heads_kv) * kHd;
  if (err == cudaSuccess) err = detail::tile_map(map_k, p.k, n_tokens, cols, kBN);
  if (err == cudaSuccess) err = detail::tile_map(map_v, p.v, n_tokens, cols, kBN);
  if (err != cudaSuccess) return err;
  tree_attention_wgmma_kernel<kSplit><<<grid, kThreads, kSmemBytes, stream>>>(p, sp, map_k, map_v);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_wgmma_hd256(const Params& p, const SplitParams& sp, int64_t n_tokens,
                               unsigned grid, cudaStream_t stream) {
  return sp.n_dense + sp.n_own > 0 ? launch_as<true>(p, sp, n_tokens, grid, stream)
                                   : launch_as<false>(p, sp, n_tokens, grid, stream);
}

}  // namespace flide::kernels::attention_detail
