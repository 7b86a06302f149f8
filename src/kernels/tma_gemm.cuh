// The Hopper GEMM machinery of the fused products (swiglu_gemm.cu: the MLP's gate and up, then
// SwiGLU; gdn_qkv_conv.cu: the GDN layer's q, k, v projection, then its conv): each multiplies
// x [M, K] by two [128][K] weight tiles at once and hands the two [128][128] products, rounded
// to bf16, to an epilogue that runs beside the next tile's products. What differs between them
// is only which rows and weight rows a tile reads and what the epilogue does.
//
// A persistent grid of 2-CTA clusters, one CTA an SM. Four warpgroups a CTA:
//   copier    warpgroup 0's first thread issues the bulk tensor copies (TMA) of each k-block's
//             x tile [128][64] and, shared across the cluster (each CTA copies one of the two
//             weight tiles into both, multicast), the weight tiles [128][64], into a ring of
//             kStages stages, 128-byte swizzled (the layout of wgmma.cuh);
//   consumers warpgroups 1 and 2 each own 64 of the tile's rows and run, per k16 step,
//             m64n128k16 for each weight tile with both operands in shared memory, keeping one
//             k-block of products in flight, then round the products to bf16 into the staging
//             tile (the same swizzle) and go on to the next tile;
//   epilogue  warpgroup 0's other three warps and warpgroup 3 (kEpilogueThreads) read the
//             staging tile and write the outputs, while the consumers' next products run. When
//             the consumers ran the epilogue themselves, the tensor cores idled through it (~14%
//             of a SwiGLU tile's time); the GDN conv's epilogue took 13.2 ms a QuALITY round
//             of 4 on three warps, 10.9 on seven (the products alone, 7.2).
// A stage is refilled once the consumers of both CTAs are done with it (each consumer warp
// arrives on the empty barriers of both); the staging tile once the epilogue is done with it.
//
// Each output's sum runs over K in one fixed order (k-blocks of 64 in turn, wgmma's k16 steps
// within), whatever M is and whichever tile a row lands in: a row's bits never depend on the
// other rows of the GEMM (batch invariance without plan pinning).
//
// FP8 operands (kFp8, the products of `--quantization fp8`): x and the weights as e4m3 with a
// float scale a row of x and a row of each weight (an output column), as quantize_rows_fp8 makes
// them. A k-block is then 128 columns: the same 128 bytes a row, the same boxes, swizzle and
// descriptors, and m64n128k32 steps in place of m64n128k16. The consumers scale each product by
// its row's and its column's scales before rounding it to bf16 into the staging tile, so the
// epilogues see what they see with bf16 operands. A row's scale depends only on that row, so the
// batch invariance above holds for FP8 too. The column scales reach each consumer warpgroup
// through shared memory, copied (cp.async) as its tile's products start: loaded from global
// memory while the tile was staged, with the tensor cores idle, they kept the FP8 SwiGLU GEMM's
// tensor pipe busy 62.5% of its time, against 68% this way (the four products 1.65 ms less a round
// of 4; bench/results/2026-12-02-fp8-column-scales.md). And the FP8 consumers keep no k-block in
// flight: each k-block's products retire, and free their stage, before the next are issued. An
// FP8 k-block is half a bf16 one's work, and with one in flight the consumers held two of the
// three stages while the copier waited to refill them (the SwiGLU GEMM 6.5% faster this way).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "kernels/cp_async.cuh"
#include "kernels/launch.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/mma_bf16.cuh"
#include "kernels/tma.cuh"
#include "kernels/wgmma.cuh"

namespace flide::kernels::tma_gemm {

constexpr int kTileM = 128, kTileN = 128, kBlockK = 64, kStages = 3, kCluster = 2;
// Every tile in shared memory (x's, each weight's, each half of a staged product) is 128 rows of
// one 64-column, 128-byte-swizzled chunk: one box shape for every tensor map.
static_assert(kTileM == kTileN && kBlockK * 2 == 128, "one [128][64] bf16 box for every tile");
// A k-block's columns: 128 bytes of each row, bf16 or FP8.
template <bool kFp8>
constexpr int kBlockCols = kFp8 ? 2 * kBlockK : kBlockK;
// Warpgroup 0: the copier thread and three epilogue warps; 1 and 2: the consumers; 3: four more
// epilogue warps. Registers move from the copier's and epilogue's warpgroups to the consumers'
// (setmaxnreg; the consumers' products and addresses need 160 without spilling).
constexpr int kThreads = 512;
constexpr int kConsumerThreads = 256, kConsumerWarps = kConsumerThreads / 32;
constexpr int kEpilogueThreads = 224;  // warps 1-3 and 12-15
constexpr int kEpilogueRegs = 96, kConsumerRegs = 160;
static_assert(128 * (2 * kEpilogueRegs + 2 * kConsumerRegs) <= 65536, "one register file");
constexpr uint32_t kTileBytes = kTileM * 128;     // one [128][64] bf16 tile: 16 KB
constexpr uint32_t kStageBytes = 3 * kTileBytes;  // x and the two weight tiles
constexpr uint32_t kOutBytes = 2 * kTileBytes;    // a [128][128] product, two [128][64] boxes
constexpr uint32_t kStagedBytes = 2 * kOutBytes;  // the two products (64 KB: 3 stages fit)
// FP8: each consumer warpgroup's copy of its tile's column scales (both weight tiles').
constexpr uint32_t kColumnScaleBytes = 2 * kTileN * sizeof(float);
constexpr uint32_t kScaleBytes = 2 * kColumnScaleBytes;
constexpr size_t kSmemBytes = 1024 + kStages * kStageBytes + kStagedBytes + kScaleBytes +
                              (2 * kStages + 2) * sizeof(uint64_t);

using detail::bar_arrive;
using detail::bar_expect;
using detail::bar_init;
using detail::bar_init_fence;
using detail::bar_wait;
using detail::tile_map;
using detail::tma_load;
// Arrive on the barrier at the same offset in cluster CTA `cta`. (No cluster-scope release: the
// arrival orders only the consumer's reads of the stage, which wgmma's wait has retired. With
// one, every arrival waited for the epilogue's stores and the kernel ran 40% slower.)
__device__ __forceinline__ void bar_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
// Every thread of the cluster. Not .aligned: the copier's first thread arrives after its
// warp's other lanes.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void epilogue_sync() {  // the epilogue's seven warps
  asm volatile("bar.sync 1, %0;\n" ::"n"(kEpilogueThreads) : "memory");
}
__device__ __forceinline__ void consumer_sync(int half) {  // one consumer warpgroup
  if (half == 0)  // constant ids: a register id makes ptxas reserve all 16 barriers
    asm volatile("bar.sync 2, 128;\n" ::: "memory");
  else
    asm volatile("bar.sync 3, 128;\n" ::: "memory");
}
// 16 bytes of shared memory at addr (a unit of the staging tile) into r, and back.
__device__ __forceinline__ void ld_shared16(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ float2 ld_shared_float2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ void st_shared16(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}
// The same box into dst of both CTAs of the cluster, completing on each one's bar.
__device__ __forceinline__ void tma_load_both(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                              uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::"
      "cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar),
      "h"(uint16_t((1u << kCluster) - 1))
      : "memory");
}
// Shared memory at src to the box (c0 = column, c1 = row) of `map`; rows past the tensor's end
// are not written.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, int c0, int c1, uint32_t src) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(src)
      : "memory");
}

// A thread's warpgroup takes its share of the register file first thing in its role's branch
// (ptxas bounds a branch's registers by the setmaxnreg that dominates it). epilogue_index: the
// thread's index among the epilogue threads, or -1 (the copier, and lanes of warp 0).
__device__ __forceinline__ bool is_consumer() {
  const int wg = int(threadIdx.x) / 128;
  return wg == 1 || wg == 2;
}
__device__ __forceinline__ void take_consumer_regs() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
}
__device__ __forceinline__ void give_up_regs() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kEpilogueRegs));
}
__device__ __forceinline__ int epilogue_index() {
  const int tid = int(threadIdx.x);
  return tid < 32 ? -1 : tid < 128 ? tid - 32 : tid - 384 + 96;
}

// The walk over units (a unit: a pair of row tiles, one a CTA, x one column tile): in groups of
// `group` row pairs, each group column tile by column tile, each column row pair by row pair.
// group 1 is row-major: the ~5 row strips the grid has in flight share their x tiles through L2,
// and the weights stay there when they fit beside them (up to kL2WeightBytes). Larger weights
// would stream from memory for every row strip; in groups of kGroupRows row pairs a weight tile
// is read once for all of them (the 4B model's MLP: 3-13% faster than cuBLASLt that way, row-major
// slower; bench/results/2026-11-30-swiglu-gemm.md, call 9).
constexpr int64_t kL2WeightBytes = int64_t(24) << 20;
constexpr int kGroupRows = 8;
inline int unit_group(int64_t weight_bytes) {
  return weight_bytes <= kL2WeightBytes ? 1 : kGroupRows;
}
struct UnitOrder {
  int pairs;    // row pairs
  int tiles_n;  // column tiles
  int group;    // unit_group
  // {row pair, column tile} of unit u.
  __device__ int2 operator()(int u) const {
    const int per_group = group * tiles_n, g = u / per_group, within = u % per_group;
    const int rows_here = min(group, pairs - g * group);
    return make_int2(g * group + within % rows_here, within / rows_here);
  }
};

// The units over tiles_m row tiles and tiles_n column tiles.
__host__ __device__ inline int64_t cluster_units(int64_t tiles_m, int64_t tiles_n) {
  return (tiles_m + kCluster - 1) / kCluster * tiles_n;
}

// Output columns of a unit whose two weight tiles are consecutive rows of one weight (two heads
// of a projection: gdn_qkv_conv, z_gated_rmsnorm).
constexpr int kPairCols = 2 * kTileN;

// A CTA's tile of a unit, and its rank, which also says which weight tile it copies for both.
// row_tile may be one past the last (an odd count's last pair): its rows arrive as zeros and are
// not stored.
struct Place {
  int row_tile, col_tile;
  uint32_t rank;
  // Where the unit's columns are kPairCols of one weight: the first weight row of the tile this
  // CTA copies.
  __device__ int paired_w_row() const { return col_tile * kPairCols + int(rank) * kTileN; }
};

// Shared memory: the ring, the staging tile (product 0, then product 1), the consumer
// warpgroups' column scales (FP8), the ring's full and empty barriers, the staging tile's full
// and empty barriers. The same offsets in both CTAs of a cluster (the multicast copies and
// remote arrivals rely on it).
struct Smem {
  uint32_t ring, staged, scales, full, empty, staged_full, staged_empty;

  __device__ static Smem carve(unsigned char* smem_raw) {
    Smem s;
    const uint32_t raw = detail::smem_u32(smem_raw);
    s.ring = (raw + 1023u) & ~1023u;
    s.staged = s.ring + kStages * kStageBytes;
    s.scales = s.staged + kStagedBytes;
    s.full = s.scales + kScaleBytes;
    s.empty = s.full + kStages * 8;
    s.staged_full = s.empty + kStages * 8;
    s.staged_empty = s.staged_full + 8;
    return s;
  }
  // Thread 0, before the cluster's first sync.
  __device__ void init_barriers() const {
    for (int st = 0; st < kStages; ++st) {
      bar_init(full + 8 * st, 1);
      bar_init(empty + 8 * st, kConsumerWarps * kCluster);
    }
    bar_init(staged_full, kConsumerThreads);
    bar_init(staged_empty, 1);
    bar_init_fence();
  }
  // Epilogue thread e, done reading the staging tile: once all seven warps are, it is free for the
  // consumers' next products.
  __device__ void release_staged(int e) const {
    epilogue_sync();
    if (e == 0) bar_arrive(staged_empty);
  }
  // Epilogue thread e, done writing the staging tile's first `boxes` [128][64] boxes: they leave
  // for columns n0, n0 + 64, ... of rows [m0, m0 + 128) of `out` (rows past its end are not
  // written), and the tile is free once the bulk copies have read it.
  __device__ __forceinline__ void send_staged(const CUtensorMap* out, int e, int m0, int n0,
                                              int boxes) const {
    wgmma::fence_async_shared();  // the epilogue's stores, seen by the bulk copies' reads
    epilogue_sync();
    if (e != 0) return;
#pragma unroll
    for (int b = 0; b < boxes; ++b)
      tma_store(out, n0 + 64 * b, m0, staged + uint32_t(b) * kTileBytes);
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    bar_arrive(staged_empty);
  }
};

// What the copier copies for one tile: x rows [x_row, x_row + 128) and this CTA's weight tile,
// rows [w_row, w_row + 128) of *w_map, into slot `rank` (0 or 1) of each stage in both CTAs.
// With FP8 operands, w_scale: the scales of those weight rows.
struct TileSource {
  int x_row;
  const CUtensorMap* w_map;
  int w_row;
  const float* w_scale = nullptr;
};

// FP8 operands: the scale of each of x's `rows` rows (rows outside [0, rows) arrive as zeros and
// take scale 0).
struct RowScales {
  const float* scale = nullptr;
  int rows = 0;
};
// What a consumer thread scales its products by: its two rows' scales (rows r and r + 8 of its
// warp's 16) and the two weight tiles' column scales.
struct TileScales {
  float x_lo, x_hi;
  const float* w[2];
};

// The copier thread: every tile's k-blocks in turn through the ring. source(u) gives unit u's
// TileSource for this CTA.
template <bool kFp8, class Source>
__device__ __forceinline__ void copy_tiles(const Smem& sm, const CUtensorMap* map_x, int first,
                                           int units, int stride, int k_blocks, uint32_t rank,
                                           Source source) {
  int stage = 0;
  uint32_t phase = 0;
  for (int u = first; u < units; u += stride) {
    const TileSource src = source(u);
    for (int kb = 0; kb < k_blocks; ++kb) {
      bar_wait(sm.empty + 8 * stage, phase ^ 1);  // the first pass finds every stage free
      const uint32_t at = sm.ring + stage * kStageBytes, bar = sm.full + 8 * stage;
      // Out-of-bounds rows (and k past K) arrive as zeros and count toward the bytes too.
      bar_expect(bar, kStageBytes);
      tma_load(at, map_x, kb * kBlockCols<kFp8>, src.x_row, bar);
      tma_load_both(at + (1 + rank) * kTileBytes, src.w_map, kb * kBlockCols<kFp8>, src.w_row, bar);
      if (++stage == kStages) stage = 0, phase ^= 1;
    }
  }
}

// A consumer warpgroup (`half`: which 64 rows of the tile): one tile's products p0 (x times
// weight tile 0) and p1, to the staging tile as bf16 once the epilogue is done with the
// previous one. stage, phase: the ring's cursor, carried from tile to tile; parity: the tile's
// count mod 2. FP8: scales(half, warp, lane) gives the thread's TileScales. Its weight tiles'
// column scales go to the warpgroup's copy in shared memory before the products; its row scales
// are loaded after the products (a copy of them too gained nothing measurable).
template <bool kFp8, class Scales>
__device__ __forceinline__ void consume_tile(const Smem& sm, int half, int k_blocks, int& stage,
                                             uint32_t& phase, uint32_t parity,
                                             float (&p0)[kTileN / 8][4], float (&p1)[kTileN / 8][4],
                                             Scales scales) {
  const int tid = int(threadIdx.x), warp = (tid % 128) / 32, lane = tid % 32;
  auto release = [&](int s) {
    if (lane == 0)
      for (uint32_t c = 0; c < kCluster; ++c) bar_arrive_cluster(sm.empty + 8 * s, c);
  };
  const uint32_t column_scales = sm.scales + uint32_t(half) * kColumnScaleBytes;
  if constexpr (kFp8) {
    const TileScales ts = scales(half, warp, lane);  // (its row scales unused here)
    consumer_sync(half);  // the warpgroup is done reading the previous tile's copy
    constexpr int kUnits = kTileN * int(sizeof(float)) / 16;  // 16-byte copies a weight tile
    const int t = tid % 128;
    if (t < 2 * kUnits)
      detail::cp_async16(column_scales + 16 * uint32_t(t), ts.w[t / kUnits] + 4 * (t % kUnits), 16);
    detail::cp_async_commit();
  }
  int prev = -1;  // the stage whose products are still in flight
  for (int kb = 0; kb < k_blocks; ++kb) {
    bar_wait(sm.full + 8 * stage, phase);
    const uint32_t at = sm.ring + stage * kStageBytes;
    const uint32_t a = at + uint32_t(half) * 64 * 128;  // this warpgroup's 64 rows of x
    wgmma::fence();
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // k16 steps of bf16 or k32 steps of FP8: 32 bytes each
      const uint64_t da = wgmma::descriptor(a + 32 * k, 0, 1024);
      const uint64_t db0 = wgmma::descriptor(at + kTileBytes + 32 * k, 0, 1024);
      const uint64_t db1 = wgmma::descriptor(at + 2 * kTileBytes + 32 * k, 0, 1024);
      const bool acc = kb > 0 || k > 0;
      if constexpr (kFp8) {
        wgmma::mma_ss_n128_e4m3(p0, da, db0, acc);
        wgmma::mma_ss_n128_e4m3(p1, da, db1, acc);
      } else {
        wgmma::mma_ss_n128(p0, da, db0, acc);
        wgmma::mma_ss_n128(p1, da, db1, acc);
      }
    }
    wgmma::commit();
    if constexpr (kFp8) {  // no k-block in flight (above)
      wgmma::wait<0>();
      release(stage);
    } else {
      wgmma::wait<1>();  // the previous k-block's products are done with their stage
      if (prev >= 0) release(prev);
      prev = stage;
    }
    if (++stage == kStages) stage = 0, phase ^= 1;
  }
  TileScales ts{};
  if constexpr (kFp8) ts = scales(half, warp, lane);
  wgmma::wait<0>();
  if (prev >= 0) release(prev);
  if constexpr (kFp8) {
    detail::cp_async_wait<0>();
    consumer_sync(half);  // every thread's copies of the column scales, seen by all
  }

  // Rounded to bf16 and stored by stmatrix, four 8x8 matrices at a time: the warp's rows 0-7 and
  // 8-15 of columns 8 j.. and 8 (j + 1)... Lane 8 m + i addresses row i of matrix m.
  bar_wait(sm.staged_empty, parity ^ 1);
  const int m = lane / 8, row = half * 64 + warp * 16 + lane % 8 + 8 * (m & 1);
#pragma unroll
  for (int j = 0; j < kTileN / 8; j += 2) {
    const uint32_t at = wgmma::swizzled(sm.staged, kTileM, row, 8 * (j + (m >> 1)));
    uint32_t r0[4], r1[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // matrix q: column tile j + q / 2, rows + 8 (q % 2)
      const int jj = j + q / 2, e = 2 * (q % 2);
      float2 s0 = make_float2(1.f, 1.f), s1 = s0;
      if constexpr (kFp8) {  // column 8 jj + 2 (lane % 4) and the next: an aligned pair
        const uint32_t c = 8 * jj + 2 * (lane % 4);
        const float xs = e == 0 ? ts.x_lo : ts.x_hi;
        const float2 w0 = ld_shared_float2(column_scales + 4 * c);
        const float2 w1 = ld_shared_float2(column_scales + kColumnScaleBytes / 2 + 4 * c);
        s0 = make_float2(xs * w0.x, xs * w0.y);
        s1 = make_float2(xs * w1.x, xs * w1.y);
      }
      const __nv_bfloat162 v0 = __floats2bfloat162_rn(p0[jj][e] * s0.x, p0[jj][e + 1] * s0.y);
      const __nv_bfloat162 v1 = __floats2bfloat162_rn(p1[jj][e] * s1.x, p1[jj][e + 1] * s1.y);
      r0[q] = *reinterpret_cast<const uint32_t*>(&v0);
      r1[q] = *reinterpret_cast<const uint32_t*>(&v1);
    }
    detail::stsm_x4(at, r0);
    detail::stsm_x4(at + kOutBytes, r1);
  }
  bar_arrive(sm.staged_full);  // release: the stores above before the epilogue's loads
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// The body every tma_gemm kernel runs once it has carved its shared memory: the barriers, then
// each thread in its role over this cluster's units (first, then every grid's worth of clusters
// on), then the cluster's last sync. The GEMM has tiles_m row tiles and tiles_n column tiles,
// walked in UnitOrder with `group`, and inner dimension K. source(place): this CTA's TileSource for
// its Place in a unit; epilogue(e, place, parity): epilogue thread e's part of it, parity the
// unit's count mod 2 (the staging barriers' phase). FP8 operands: x_scales, and each
// TileSource's w_scale.
template <bool kFp8 = false, class Source, class Epilogue>
__device__ __forceinline__ void run_units(const Smem& sm, const CUtensorMap* map_x, int tiles_m,
                                          int tiles_n, int group, int K, Source source,
                                          Epilogue epilogue, RowScales x_scales = {}) {
  const int tid = int(threadIdx.x);
  const int first = int(blockIdx.x) / kCluster, stride = int(gridDim.x) / kCluster;
  const uint32_t rank = cluster_rank();
  const UnitOrder order{(tiles_m + kCluster - 1) / kCluster, tiles_n, group};
  const int units = int(cluster_units(tiles_m, tiles_n));
  const int k_blocks = (K + kBlockCols<kFp8> - 1) / kBlockCols<kFp8>;
  const auto place = [&](int u) {
    const int2 pc = order(u);
    return Place{pc.x * kCluster + int(rank), pc.y, rank};
  };
  if (tid == 0) sm.init_barriers();
  cluster_sync();  // barriers initialised before either CTA copies into or arrives on them

  if (is_consumer()) {
    take_consumer_regs();
    int stage = 0;
    uint32_t phase = 0, parity = 0;
    float p0[kTileN / 8][4], p1[kTileN / 8][4];
    for (int u = first; u < units; u += stride, parity ^= 1) {
      // The unit's scales (FP8): its x rows' and both CTAs' weight tiles'.
      const auto scales = [&](int half, int warp, int lane) {
        const Place p = place(u);
        const int r = source(p).x_row + half * 64 + warp * 16 + lane / 4;
        const auto row_scale = [&](int row) {
          return row >= 0 && row < x_scales.rows ? x_scales.scale[row] : 0.f;
        };
        return TileScales{row_scale(r),
                          row_scale(r + 8),
                          {source(Place{p.row_tile, p.col_tile, 0}).w_scale,
                           source(Place{p.row_tile, p.col_tile, 1}).w_scale}};
      };
      consume_tile<kFp8>(sm, tid / 128 - 1, k_blocks, stage, phase, parity, p0, p1, scales);
    }
  } else {
    give_up_regs();
    const int e = epilogue_index();
    if (tid == 0) {
      copy_tiles<kFp8>(sm, map_x, first, units, stride, k_blocks, rank,
                       [&](int u) { return source(place(u)); });
    } else if (e >= 0) {
      uint32_t parity = 0;
      for (int u = first; u < units; u += stride, parity ^= 1) epilogue(e, place(u), parity);
    }
  }
  // No CTA leaves while its peer may still copy into its shared memory or arrive on its barriers.
  cluster_sync();
}

// ---- host ----

// The kernels' row arithmetic is int: M rows plus a tile pair must fit.
inline bool rows_fit(int64_t M) {
  return M <= INT32_MAX - kCluster * kTileM;
}

// Bytes of an operand element: what the weights of a unit_group weigh.
template <bool kFp8>
constexpr int64_t kOperandBytes = kFp8 ? 1 : 2;

// Whether FP8 operands of inner dimension K fit the products: K a multiple of 16, x's row scales
// given, and each weight's row scales 16-byte aligned, as tiles' column scales (the consumers
// copy them in 16-byte units; a tile starts at a multiple of 128 rows).
inline bool fp8_scales_ok(int64_t K, const float* x_scale,
                          std::initializer_list<const float*> weight_scales) {
  if (K % 16 != 0 || !x_scale) return false;
  for (const float* s : weight_scales)
    if (!s || reinterpret_cast<uintptr_t>(s) % 16 != 0) return false;
  return true;
}

// The launch of a tma_gemm kernel over `units` tile pairs: as many clusters as fit at once (a
// GPC's SMs pair up unevenly), at most one a unit.
template <auto kKernel, class... Args>
cudaError_t launch(int64_t units, cudaStream_t stream, Args... args) {
  cudaError_t err = detail::raise_smem_limit<kKernel, int(kSmemBytes)>();
  int sms = 0;
  if (err == cudaSuccess) err = detail::multiprocessors(sms);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim = {kCluster, 1, 1};
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  config.attrs = cluster;
  config.numAttrs = 1;
  config.gridDim = dim3(unsigned(sms / kCluster * kCluster));
  int clusters = 0;
  err = cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config);
  if (err != cudaSuccess) return err;
  if (clusters < 1) return cudaErrorInvalidConfiguration;
  config.gridDim = dim3(unsigned(kCluster * (units < clusters ? units : clusters)));
  err = cudaLaunchKernelEx(&config, kKernel, args...);
  return err != cudaSuccess ? err : cudaGetLastError();
}

}  // namespace flide::kernels::tma_gemm
