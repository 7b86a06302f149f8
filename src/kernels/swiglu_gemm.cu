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
// Under --quantization fp8, where the down projection reads the output on FP8 blocks
// (CudaOps::swiglu_into_product), the epilogue writes only that form: the SwiGLU values rounded
// to bf16 as always, then quantized a row's 128 columns (the tile's) at a time, with plain
// coalesced stores in place of the bulk ones. The down projection then reads a byte an element
// where it read two, and the bf16 output is never written.
//
// Layout (tma_gemm.cuh): each cluster walks pairs of output tiles (two row tiles of 128 rows,
// one a CTA, x one column tile of 128) in row-major order, or in groups of row pairs where the
// weights are too large to stay in L2 (UnitOrder). The two weight tiles of a k-block are the gate's
// (copied by CTA 0) and the up's (CTA 1); the epilogue warps compute SwiGLU on the staged gate and
// up, into gate's place, and send the tile out with bulk tensor stores.
//
// Measured against cuBLASLt's pair of products and silu_mul (bench/swiglu_gemm.cu): bitwise the
// same outputs on the H200; with the epilogue in the consumers, 11% less time at full clock and
// 9% at the power limit for a round of 4 QuALITY requests
// (bench/results/2026-11-30-swiglu-gemm.md); with epilogue warps, 24% and 17.5% less at 25,040 rows
// (488 us against 547 for the former, bench/results/2026-11-30-fused-gdn-conv.md). What it took,
// measured on the way there with an epilogue of one 4-byte store a thread and column pair: the
// clusters' shared weight copies (3% less time at the power limit than CTAs alone) and
// m64n128k16 products (one m64n256k16 over gate and up together was slower); then the bulk-store
// epilogue (that version had been 8% slower than the unfused path at full clock).
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"
#include "kernels/fp8_rows.cuh"
#include "kernels/tma_gemm.cuh"

namespace flide::kernels {
namespace {

using namespace tma_gemm;

// The epilogue threads (e): SwiGLU on the staged gate and up, 16-byte units at a time (the swizzle
// moves whole units, so gate's and up's units at one offset hold the same elements), into gate's
// place, which then leaves as two bulk tensor stores.
__device__ __forceinline__ void swiglu_epilogue(const Smem& sm, const CUtensorMap* map_out, int e,
                                                int m0, int n0, uint32_t parity) {
  bar_wait(sm.staged_full, parity);
  for (int i = e; i < int(kOutBytes / 16); i += kEpilogueThreads) {
    const uint32_t g_at = sm.staged + 16 * uint32_t(i), u_at = g_at + kOutBytes;
    uint32_t gw[4], uw[4], yw[4];
    ld_shared16(g_at, gw);
    ld_shared16(u_at, uw);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&gw[w]));
      const float2 uv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&uw[w]));
      const __nv_bfloat162 y =
          __floats2bfloat162_rn(detail::silu_times(gv.x, uv.x), detail::silu_times(gv.y, uv.y));
      yw[w] = *reinterpret_cast<const uint32_t*>(&y);
    }
    st_shared16(g_at, yw);
  }
  sm.send_staged(map_out, e, m0, n0, 2);  // gate's place: the output's 128 columns
}

// The same with the output as Fp8Blocks (dense.h). A row's 16 units go to 16 consecutive threads
// (e / 16 its tile row, e % 16 its unit), so that its block's largest magnitude is a 16-lane
// reduction and its 128 bytes leave in one coalesced store; 14 rows a pass, both halves of a warp
// the same number of passes (14 and 128 are even). The SwiGLU values are rounded to bf16 as above
// before they are quantized: out8 is the quantized bf16 output.
__device__ __forceinline__ void swiglu_epilogue_fp8(const Smem& sm, const Fp8Blocks& out8, int M,
                                                    int N, int e, int m0, int n0, uint32_t parity) {
  constexpr int kUnitsPerRow = kTileN / 8, kRowsPerPass = kEpilogueThreads / kUnitsPerRow;
  static_assert(kTileN == kFp8Block && kTileM % 2 == 0 && kRowsPerPass % 2 == 0);
  const int unit = e % kUnitsPerRow;
  bar_wait(sm.staged_full, parity);
  for (int i = e / kUnitsPerRow; i < kTileM; i += kRowsPerPass) {
    const uint32_t g_at = wgmma::swizzled(sm.staged, kTileM, i, 8 * unit), u_at = g_at + kOutBytes;
    uint32_t gw[4], uw[4];
    ld_shared16(g_at, gw);
    ld_shared16(u_at, uw);
    float y[8], amax = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&gw[w]));
      const float2 uv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&uw[w]));
      const float2 yv = __bfloat1622float2(
          __floats2bfloat162_rn(detail::silu_times(gv.x, uv.x), detail::silu_times(gv.y, uv.y)));
      y[2 * w] = yv.x, y[2 * w + 1] = yv.y;
      amax = fmaxf(amax, fmaxf(fabsf(yv.x), fabsf(yv.y)));
    }
    const float s = detail::fp8_row_scale<kUnitsPerRow>(amax);
    const int m = m0 + i;
    if (m < M) {
      detail::store_e4m3x8(out8.data + int64_t(m) * N + n0 + 8 * unit, y, 1.f / s);
      if (unit == 0) out8.scale[fp8_block_scale_at(m, n0 / kFp8Block, M, N / kFp8Block)] = s;
    }
  }
  sm.release_staged(e);
}

// FP8 operands' scales (unused with bf16): x's rows', the gate's and the up's rows'.
struct SwigluScales {
  RowScales x;
  const float* gate = nullptr;
  const float* up = nullptr;
};

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    swiglu_gemm_kernel(const __grid_constant__ CUtensorMap map_x,
                       const __grid_constant__ CUtensorMap map_gate,
                       const __grid_constant__ CUtensorMap map_up,
                       const __grid_constant__ CUtensorMap map_out, int M, int N, int K, int group,
                       const SwigluScales scales, const Fp8Blocks out8) {
  extern __shared__ unsigned char smem_raw[];
  const Smem sm = Smem::carve(smem_raw);
  run_units<kFp8>(
      sm, &map_x, (M + kTileM - 1) / kTileM, N / kTileN, group, K,
      [&](const Place& p) {
        const int w_row = p.col_tile * kTileN;
        return p.rank == 0 ? TileSource{p.row_tile * kTileM, &map_gate, w_row, scales.gate + w_row}
                           : TileSource{p.row_tile * kTileM, &map_up, w_row, scales.up + w_row};
      },
      [&](int e, const Place& p, uint32_t parity) {
        if (out8.data)
          swiglu_epilogue_fp8(sm, out8, M, N, e, p.row_tile * kTileM, p.col_tile * kTileN, parity);
        else
          swiglu_epilogue(sm, &map_out, e, p.row_tile * kTileM, p.col_tile * kTileN, parity);
      },
      scales.x);
  // The output's last bulk stores finish before the CTA does.
  if (epilogue_index() == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// The launch once the operands' maps are made (bf16 or FP8). With out8.data, out is not used.
template <bool kFp8>
cudaError_t launch_swiglu(const CUtensorMap& map_x, const CUtensorMap& map_gate,
                          const CUtensorMap& map_up, bf16* out, const Fp8Blocks& out8, int64_t M,
                          int64_t N, int64_t K, const SwigluScales& scales, cudaStream_t stream) {
  CUtensorMap map_out{};
  if (!out8.data)
    if (const cudaError_t err = tile_map(map_out, out, M, N); err != cudaSuccess) return err;
  const int64_t units = cluster_units((M + kTileM - 1) / kTileM, N / kTileN);
  const int64_t weight_bytes = 2 * N * K * kOperandBytes<kFp8>;
  return launch<swiglu_gemm_kernel<kFp8>>(units, stream, map_x, map_gate, map_up, map_out, int(M),
                                          int(N), int(K), unit_group(weight_bytes), scales, out8);
}

}  // namespace

bool swiglu_gemm_supported(const void* x, const void* w_gate, const void* w_up, const void* out,
                           int64_t N, int64_t K) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(x) && aligned(w_gate) && aligned(w_up) && aligned(out) && N % kTileN == 0 &&
         K % 8 == 0;
}

cudaError_t swiglu_gemm(const bf16* x, const bf16* w_gate, const bf16* w_up, bf16* out, int64_t M,
                        int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if (!swiglu_gemm_supported(x, w_gate, w_up, out, N, K) || K == 0 || !rows_fit(M))
    return cudaErrorInvalidValue;
  CUtensorMap map_x, map_gate, map_up;
  cudaError_t err = tile_map(map_x, x, M, K);
  if (err == cudaSuccess) err = tile_map(map_gate, w_gate, N, K);
  if (err == cudaSuccess) err = tile_map(map_up, w_up, N, K);
  if (err != cudaSuccess) return err;
  return launch_swiglu<false>(map_x, map_gate, map_up, out, {}, M, N, K, {}, stream);
}

cudaError_t swiglu_gemm_fp8(Fp8Rows x, Fp8Rows w_gate, Fp8Rows w_up, bf16* out, Fp8Blocks out8,
                            int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  const void* written = out8.data ? static_cast<const void*>(out8.data) : out;
  if (!swiglu_gemm_supported(x.data, w_gate.data, w_up.data, written, N, K) || K == 0 ||
      !rows_fit(M) || !fp8_scales_ok(K, x.scale, {w_gate.scale, w_up.scale}) ||
      (out8.data && !out8.scale))
    return cudaErrorInvalidValue;
  CUtensorMap map_x, map_gate, map_up;
  cudaError_t err = detail::tile_map_fp8(map_x, x.data, M, K);
  if (err == cudaSuccess) err = detail::tile_map_fp8(map_gate, w_gate.data, N, K);
  if (err == cudaSuccess) err = detail::tile_map_fp8(map_up, w_up.data, N, K);
  if (err != cudaSuccess) return err;
  const SwigluScales scales{{x.scale, int(M)}, w_gate.scale, w_up.scale};
  return launch_swiglu<true>(map_x, map_gate, map_up, out, out8, M, N, K, scales, stream);
}

}  // namespace flide::kernels
