// The MLP's gate and up projections and SwiGLU in one GEMM: out = silu(x Wg^T) * (x Wu^T).
//
// Why: unfused, the two products write gate and up (2 I bf16 a row), and silu_mul reads them back
// and writes the product (I a row): 5 I of traffic a row where the product alone needs I. On the
// 0.8B model that pass is ~5% of a served round, and the server runs at the H200's power limit,
// where only less work (bytes moved, instructions issued) buys requests/s.
//
// Rounding is the unfused path's: bf16 operands, fp32 accumulation, gate and up rounded to bf16,
// then silu(gate) * up in fp32 (elementwise.cu's formula) rounded to bf16. Each output's sum runs
// over K in one fixed order (k-blocks of 64 in turn, wgmma's k16 steps within), whatever M is and
// whichever tile a row lands in: a row's bits do not depend on the other rows of the GEMM (batch
// invariance, with no plan pinning).
//
// Layout: a persistent grid of 2-CTA clusters, one CTA an SM, each cluster walking pairs of
// output tiles (two row tiles of 128 rows, one a CTA, x one column tile of 128) in row-major
// order: the ~5 row strips in flight share their x tiles through L2, and both weights stay there
// (swiglu_gemm_supported). Three warpgroups a CTA: warpgroup 0's first thread issues the bulk
// tensor copies (TMA) of each k-block's x tile [128][64] and the two weight tiles [128][64] into
// a ring of kStages stages, 128-byte swizzled (the layout of wgmma.cuh); warpgroups 1 and 2 each
// own 64 of the tile's rows and run, per k16 step, m64n128k16 for gate and for up with both
// operands read from shared memory, keeping one k-block of products in flight. The copier runs
// ahead into the next tile while the consumers finish this one.
//
// The epilogue runs beside the next tile's products: the consumers only round gate and up to
// bf16 into a staging tile and go on; warpgroup 0's other three warps compute SwiGLU there and
// send the tile out with bulk tensor stores. When the consumers did the SwiGLU themselves, the
// tensor cores idled through it: ~14% of a tile's time (the kernel ran at 626 TFLOP/s where
// cuBLASLt's two products ran at 729). The staging tile (64 KB) leaves room for 3 stages.
//
// Measured against cuBLASLt's pair of products and silu_mul (bench/swiglu_gemm.cu,
// bench/results/2026-11-30-swiglu-gemm.md): bitwise the same outputs on the H200, 11% less time
// at full clock and 9% at the power limit for a round of 4 QuALITY requests. What it took,
// measured on the way there with an epilogue of one 4-byte store a thread and column pair: the
// clusters' shared weight copies (3% less time at the power limit than CTAs alone) and
// m64n128k16 products (one m64n256k16 over gate and up together was slower); then the bulk-store
// epilogue (that version had been 8% slower than the unfused path at full clock).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstring>

#include "kernels/bf16x8.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/dense.h"
#include "kernels/launch.cuh"
#include "kernels/wgmma.cuh"

namespace flide::kernels {
namespace {

constexpr int kTileM = 128, kTileN = 128, kBlockK = 64, kStages = 3, kCluster = 2;
// Every tile in shared memory (x's, each weight's, each half of the output's) is 128 rows of one
// 64-column, 128-byte-swizzled chunk: one box shape for every tensor map.
static_assert(kTileM == kTileN && kBlockK * 2 == 128, "one [128][64] bf16 box for every tile");
constexpr int kThreads = 384;  // copier and epilogue warpgroup + two consumer warpgroups
constexpr int kConsumerThreads = kThreads - 128, kConsumerWarps = kConsumerThreads / 32;
constexpr int kEpilogueThreads = 96;              // warps 1-3 (warp 0 holds the copier)
constexpr uint32_t kTileBytes = kTileM * 128;     // one [128][64] bf16 tile: 16 KB
constexpr uint32_t kStageBytes = 3 * kTileBytes;  // x, gate weight, up weight
constexpr uint32_t kOutBytes = 2 * kTileBytes;    // a [128][128] tile, two [128][64] boxes
constexpr uint32_t kStagedBytes = 2 * kOutBytes;  // gate (then the output), up
constexpr size_t kSmemBytes =
    1024 + kStages * kStageBytes + kStagedBytes + (2 * kStages + 2) * sizeof(uint64_t);
// Both weights (2 N K bf16) up to this size stay in L2 beside the x row strips in flight. Larger
// ones (the 4B model's 94 MB) would stream from memory for every row strip in row-major order;
// a grouped order beat cuBLASLt there (bench/results/2026-11-30-swiglu-gemm.md, call 9) but has
// not run through the GPU tests yet, so those shapes stay on the unfused path.
constexpr int64_t kMaxWeightBytes = int64_t(24) << 20;

__device__ __forceinline__ void bar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void bar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
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
__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Every thread of the cluster. Not .aligned: the copier's first thread arrives after its
// warp's other lanes.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void epilogue_sync() {  // the epilogue's three warps
  asm volatile("bar.sync 1, %0;\n" ::"n"(kEpilogueThreads) : "memory");
}
// Box (c0 = k, c1 = row) of `map` into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
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

// The two CTAs of a cluster take the two row tiles of a row pair, with the same column tile, in
// turn: the weights' tiles of a k-block are copied once for both (CTA 0 the gate's, CTA 1 the
// up's, each into both), halving what the weights cost L2. So a stage is refilled once both
// CTAs' consumers are done with it: each consumer warp arrives on the empty barriers of both.
__global__ void __launch_bounds__(kThreads, 1)
    swiglu_gemm_kernel(const __grid_constant__ CUtensorMap map_x,
                       const __grid_constant__ CUtensorMap map_gate,
                       const __grid_constant__ CUtensorMap map_up,
                       const __grid_constant__ CUtensorMap map_out, int M, int N, int K) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = detail::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // the same offset in both CTAs of the cluster
  const uint32_t staged = base + kStages * kStageBytes;  // gate (then the output), up
  const uint32_t full = staged + kStagedBytes, empty = full + kStages * 8;
  const uint32_t staged_full = empty + kStages * 8, staged_empty = staged_full + 8;
  const int tid = int(threadIdx.x), wg = tid / 128;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  const int tiles_n = N / kTileN;
  const int units = (M + kCluster * kTileM - 1) / (kCluster * kTileM) * tiles_n;
  const int first = int(blockIdx.x) / kCluster, stride = int(gridDim.x) / kCluster;
  const int k_blocks = (K + kBlockK - 1) / kBlockK;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      bar_init(full + 8 * s, 1);
      bar_init(empty + 8 * s, kConsumerWarps * kCluster);
    }
    bar_init(staged_full, kConsumerThreads);
    bar_init(staged_empty, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  cluster_sync();  // barriers initialised before either CTA copies into or arrives on them

  if (tid == 0) {  // the copier
    int stage = 0;
    uint32_t phase = 0;
    for (int u = first; u < units; u += stride) {
      const int m0 = (u / tiles_n * kCluster + int(rank)) * kTileM, n0 = u % tiles_n * kTileN;
      for (int kb = 0; kb < k_blocks; ++kb) {
        bar_wait(empty + 8 * stage, phase ^ 1);  // the first pass finds every stage free
        const uint32_t at = base + stage * kStageBytes, bar = full + 8 * stage;
        // Out-of-bounds rows (and k past K) arrive as zeros and count toward the bytes too.
        bar_expect(bar, kStageBytes);
        tma_load(at, &map_x, kb * kBlockK, m0, bar);
        tma_load_both(at + (1 + rank) * kTileBytes, rank == 0 ? &map_gate : &map_up, kb * kBlockK,
                      n0, bar);
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
  } else if (wg == 0 && tid >= 32) {  // the epilogue: warps 1-3
    const int e = tid - 32;
    uint32_t parity = 0;
    for (int u = first; u < units; u += stride, parity ^= 1) {
      const int m0 = (u / tiles_n * kCluster + int(rank)) * kTileM, n0 = u % tiles_n * kTileN;
      bar_wait(staged_full, parity);
      // 16-byte units of gate and up at the same place, SwiGLU'd into gate's. The swizzle moves
      // whole units, so the unit index is enough.
      for (int i = e; i < int(kOutBytes / 16); i += kEpilogueThreads) {
        const uint32_t g_at = staged + 16 * uint32_t(i), u_at = g_at + kOutBytes;
        uint32_t gw[4], uw[4], yw[4];
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(gw[0]), "=r"(gw[1]), "=r"(gw[2]), "=r"(gw[3])
                     : "r"(g_at));
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(uw[0]), "=r"(uw[1]), "=r"(uw[2]), "=r"(uw[3])
                     : "r"(u_at));
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&gw[w]));
          const float2 uv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&uw[w]));
          const __nv_bfloat162 y = __floats2bfloat162_rn(gv.x * detail::sigmoid_fast(gv.x) * uv.x,
                                                         gv.y * detail::sigmoid_fast(gv.y) * uv.y);
          yw[w] = *reinterpret_cast<const uint32_t*>(&y);
        }
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(g_at), "r"(yw[0]),
                     "r"(yw[1]), "r"(yw[2]), "r"(yw[3])
                     : "memory");
      }
      wgmma::fence_async_shared();  // the stores above, seen by the bulk copy's reads
      epilogue_sync();
      if (e == 0) {
        tma_store(&map_out, n0, m0, staged);
        tma_store(&map_out, n0 + 64, m0, staged + kTileBytes);
        asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        // The staging tile is free again once the stores have read it.
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        bar_arrive(staged_empty);
      }
    }
    if (e == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  } else if (wg > 0) {  // a consumer warpgroup: 64 rows of each tile
    const int half = wg - 1, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    int stage = 0;
    uint32_t phase = 0, parity = 0;
    float gate[kTileN / 8][4], up[kTileN / 8][4];
    auto release = [&](int s) {
      if (lane == 0)
        for (uint32_t c = 0; c < kCluster; ++c) bar_arrive_cluster(empty + 8 * s, c);
    };
    for (int u = first; u < units; u += stride, parity ^= 1) {
      int prev = -1;  // the stage whose products are still in flight
      for (int kb = 0; kb < k_blocks; ++kb) {
        bar_wait(full + 8 * stage, phase);
        const uint32_t at = base + stage * kStageBytes;
        const uint32_t a = at + uint32_t(half) * 64 * 128;  // this warpgroup's 64 rows of x
        wgmma::fence();
#pragma unroll
        for (int k = 0; k < kBlockK / 16; ++k) {
          const uint64_t da = wgmma::descriptor(a + 32 * k, 0, 1024);
          const bool acc = kb > 0 || k > 0;
          wgmma::mma_ss_n128(gate, da, wgmma::descriptor(at + kTileBytes + 32 * k, 0, 1024), acc);
          wgmma::mma_ss_n128(up, da, wgmma::descriptor(at + 2 * kTileBytes + 32 * k, 0, 1024), acc);
        }
        wgmma::commit();
        wgmma::wait<1>();  // the previous k-block's products are done with their stage
        if (prev >= 0) release(prev);
        prev = stage;
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
      wgmma::wait<0>();
      release(prev);

      // Hand the tile to the epilogue warps as bf16 gate and up (the unfused path's rounding),
      // swizzled like the inputs, once they are done with the previous one.
      bar_wait(staged_empty, parity ^ 1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = half * 64 + warp * 16 + g + 8 * h;  // rows g, g + 8 of the warp's 16
#pragma unroll
        for (int j = 0; j < kTileN / 8; ++j) {  // columns 8 j + 2 t and the next
          const __nv_bfloat162 gv = __floats2bfloat162_rn(gate[j][2 * h], gate[j][2 * h + 1]);
          const __nv_bfloat162 uv = __floats2bfloat162_rn(up[j][2 * h], up[j][2 * h + 1]);
          const uint32_t at = wgmma::swizzled(staged, kTileM, r, 8 * j) + 4 * t;
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at),
                       "r"(*reinterpret_cast<const uint32_t*>(&gv)));
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + kOutBytes),
                       "r"(*reinterpret_cast<const uint32_t*>(&uv)));
        }
      }
      bar_arrive(staged_full);  // release: the stores above before the epilogue's loads
    }
  }
  // No CTA leaves while its peer may still copy into its shared memory or arrive on its barriers.
  cluster_sync();
}

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// The driver's cuTensorMapEncodeTiled, found through the runtime (no link against libcuda), once
// per process (a static's initialisation is thread-safe: backends of several devices may ask at
// once).
cudaError_t encoder(EncodeTiled& fn) {
  struct Found {
    cudaError_t err;
    EncodeTiled fn;
  };
  static const Found found = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult result{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                             cudaEnableDefault, &result);
    if (err != cudaSuccess) return Found{err, nullptr};
    if (result != cudaDriverEntryPointSuccess || !p) return Found{cudaErrorNotSupported, nullptr};
    return Found{cudaSuccess, reinterpret_cast<EncodeTiled>(p)};
  }();
  fn = found.fn;
  return found.err;
}

// A row-major [rows, cols] bf16 matrix read in [128][64] boxes, 128-byte swizzled.
cudaError_t tile_map(CUtensorMap& map, const bf16* p, int64_t rows, int64_t cols) {
  EncodeTiled encode = nullptr;
  if (const cudaError_t err = encoder(encode); err != cudaSuccess) return err;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {kBlockK, kTileM};
  const cuuint32_t steps[2] = {1, 1};
  std::memset(&map, 0, sizeof map);
  const CUresult r =
      encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(p), dims, strides, box,
             steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace

bool swiglu_gemm_supported(const void* x, const void* w_gate, const void* w_up, const void* out,
                           int64_t N, int64_t K) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(x) && aligned(w_gate) && aligned(w_up) && aligned(out) && N % kTileN == 0 &&
         K % 8 == 0 && 4 * N * K <= kMaxWeightBytes;
}

cudaError_t swiglu_gemm(const bf16* x, const bf16* w_gate, const bf16* w_up, bf16* out, int64_t M,
                        int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  // The kernel's row arithmetic is int: M plus a tile pair must fit.
  if (!swiglu_gemm_supported(x, w_gate, w_up, out, N, K) || K == 0 ||
      M > INT32_MAX - kCluster * kTileM)
    return cudaErrorInvalidValue;
  CUtensorMap map_x, map_gate, map_up, map_out;
  cudaError_t err = tile_map(map_x, x, M, K);
  if (err == cudaSuccess) err = tile_map(map_gate, w_gate, N, K);
  if (err == cudaSuccess) err = tile_map(map_up, w_up, N, K);
  if (err == cudaSuccess) err = tile_map(map_out, out, M, N);
  if (err == cudaSuccess) err = detail::raise_smem_limit<swiglu_gemm_kernel, int(kSmemBytes)>();
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
  int clusters = 0;  // how many fit at once, one CTA an SM (a GPC's SMs pair up unevenly)
  err = cudaOccupancyMaxActiveClusters(&clusters, swiglu_gemm_kernel, &config);
  if (err != cudaSuccess) return err;
  if (clusters < 1) return cudaErrorInvalidConfiguration;
  const int64_t units = (M + kCluster * kTileM - 1) / (kCluster * kTileM) * (N / kTileN);
  config.gridDim = dim3(unsigned(kCluster * (units < clusters ? units : clusters)));
  err = cudaLaunchKernelEx(&config, swiglu_gemm_kernel, map_x, map_gate, map_up, map_out, int(M),
                           int(N), int(K));
  return err != cudaSuccess ? err : cudaGetLastError();
}

}  // namespace flide::kernels
