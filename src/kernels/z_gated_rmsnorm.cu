// The GDN layer's gate product and its gated norm in one GEMM (tma_gemm.cuh):
// out = rmsnorm(o) * w * silu(h Wz^T) per value head of 128 values.
//
// Why: unfused, the product writes z (Vd bf16 a row) and gated_rmsnorm reads o and z back and
// writes out: z's round trip and a pass of its own (on the 0.8B model, 2.8 + 2.0 ms of a
// QuALITY round of 4). Here the norm runs in the GEMM's epilogue warps beside the next tile's
// products, and z never leaves the SM. (With the epilogue in the consumers and 128-column tiles
// the fusion had gained nothing: bench/results/2026-11-30-swiglu-gemm.md, call 8.)
//
// Rounding is the unfused path's, bit for bit: z rounded to bf16 as the product's output was,
// then gated_rmsnorm's steps (norms.cu) for a 128-wide row: 16 lanes a head, 8 values each, the
// squares of o summed in fp32 in the lane's order and then by the same butterfly, rsqrt(mean +
// eps), w * (o * s) * (z * sigmoid(z)), one rounding to bf16.
//
// Under --quantization fp8, where the output projection reads the output on FP8 blocks
// (CudaOps::z_gated_rmsnorm_into_product), each head's 128 values, rounded to bf16 as always, are
// quantized as one block instead of stored in bf16: a head is a block.
//
// Tiles: a tile pair's 256 columns are two heads (CTA 0 copies the first weight tile, CTA 1 the
// second); a warp's 32 lanes hold one row of both, 8 values each. The epilogue's seven warps
// each walk a seventh of the tile's 128 rows two at a time, loading o a pair ahead.
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"
#include "kernels/fp8_rows.cuh"
#include "kernels/tma_gemm.cuh"

namespace flide::kernels {
namespace {

using namespace tma_gemm;
using detail::load_raw;
using detail::Raw;

constexpr int kHeadDim = kTileN;                // a head is a tile's columns
constexpr int kVec = 8;                         // values a lane: one 16-byte access
constexpr int kLanesPerHead = kHeadDim / kVec;  // the norm's lane group
constexpr int kEpilogueWarps = kEpilogueThreads / 32;
constexpr int kRowsPerWarp = (kTileM + kEpilogueWarps - 1) / kEpilogueWarps;

struct NormArgs {
  const bf16* o;   // [M, Vd]
  const bf16* w;   // [128]
  bf16* out;       // [M, Vd]
  Fp8Blocks out8;  // or, with out8.data, the output here
  int M, Vd;
  float eps;
};

// The output as Fp8Blocks: a head's 16 lanes are its 128-column block, quantized once rounded to
// bf16 as the bf16 output is (out8 is the quantized bf16 output). Lane col (its head's first
// column) of row m, output column c.
__device__ __forceinline__ void store_block_row(const NormArgs& a, int m, int64_t c, int col,
                                                float (&y)[kVec]) {
  float amax = 0.f;
#pragma unroll
  for (int v = 0; v < kVec; ++v) {
    y[v] = __bfloat162float(__float2bfloat16_rn(y[v]));
    amax = fmaxf(amax, fabsf(y[v]));
  }
  const float s = detail::fp8_row_scale<kLanesPerHead>(amax);
  detail::store_e4m3x8(a.out8.data + m * int64_t(a.Vd) + c, y, 1.f / s);
  if (col == 0) a.out8.scale[fp8_block_scale_at(m, c / kFp8Block, a.M, a.Vd / kFp8Block)] = s;
}

// kRows rows from tile row i (stream row m) on: o_in their o, their z staged at `staged`, the
// lane's columns col of the head (c of the output). Their chains (the squares, the butterfly,
// the gate's MUFU, the store) interleave, where one row alone left the warp waiting.
template <int kRows>
__device__ __forceinline__ void norm_rows(const NormArgs& a, uint32_t staged, int col, int64_t c,
                                          const float (&wv)[kVec], int m, int i,
                                          const Raw<kVec> (&o_in)[kRows]) {
  Raw<kVec> z_raw[kRows];
#pragma unroll
  for (int q = 0; q < kRows; ++q)
    ld_shared16(wgmma::swizzled(staged, kTileM, i + q, col), z_raw[q].h);
  float sum_sq[kRows];
  detail::group_sum_sq_rows(o_in, kLanesPerHead, sum_sq);
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    const float s = detail::rms_scale(sum_sq[q], kHeadDim, a.eps);
    float y[kVec];
#pragma unroll
    for (int v = 0; v < kVec; ++v)
      y[v] = detail::gated_rms(wv[v], detail::raw_at(o_in[q], v), s, detail::raw_at(z_raw[q], v));
    if (a.out8.data)
      store_block_row(a, m + q, c, col, y);
    else
      detail::store8(a.out + (m + q) * int64_t(a.Vd) + c, kVec, true, y);
  }
}

// The epilogue warps on one tile pair's staged z: rows [m0, m0 + 128), columns [n0, n0 + 256).
__device__ __forceinline__ void norm_epilogue(const Smem& sm, const NormArgs& a, int e, int m0,
                                              int n0, uint32_t parity) {
  const int warp = e / 32, lane = e % 32;
  const int head = lane / kLanesPerHead, col = (lane % kLanesPerHead) * kVec;
  const int64_t c = n0 + head * kHeadDim + col;  // this lane's first column
  const uint32_t staged = sm.staged + uint32_t(head) * kOutBytes;
  float wv[kVec];
  {
    const Raw<kVec> raw = load_raw<kVec>(a.w + col);
#pragma unroll
    for (int v = 0; v < kVec; ++v) wv[v] = detail::raw_at(raw, v);
  }
  const int i_begin = warp * kRowsPerWarp;
  const int i_end = min(min(kTileM, i_begin + kRowsPerWarp), a.M - m0);
  auto o_row = [&](int i) {  // o of tile row i (rows past M: not read)
    return i < i_end ? load_raw<kVec>(a.o + (m0 + i) * int64_t(a.Vd) + c) : Raw<kVec>{};
  };
  // o a pair ahead: one row's work did not cover a load's latency (the load held the epilogue
  // warps at a sixth of their samples). The first pair loads before the wait, beside the
  // products.
  Raw<kVec> next[2] = {o_row(i_begin), o_row(i_begin + 1)};
  bar_wait(sm.staged_full, parity);
  int i = i_begin;
  for (; i + 1 < i_end; i += 2) {
    const Raw<kVec> pair[2] = {next[0], next[1]};
    next[0] = o_row(i + 2), next[1] = o_row(i + 3);
    norm_rows<2>(a, staged, col, c, wv, m0 + i, i, pair);
  }
  if (i < i_end) {  // an odd count's last row
    const Raw<kVec> last[1] = {next[0]};
    norm_rows<1>(a, staged, col, c, wv, m0 + i, i, last);
  }
  sm.release_staged(e);
}

// FP8 operands: h's row scales and w_z's (unused with bf16).
struct ZScales {
  RowScales h;
  const float* w_z = nullptr;
};

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    z_gated_rmsnorm_kernel(const __grid_constant__ CUtensorMap map_h,
                           const __grid_constant__ CUtensorMap map_wz, const NormArgs a, int K,
                           int group, const ZScales scales) {
  extern __shared__ unsigned char smem_raw[];
  const Smem sm = Smem::carve(smem_raw);
  run_units<kFp8>(
      sm, &map_h, (a.M + kTileM - 1) / kTileM, a.Vd / kPairCols, group, K,
      [&](const Place& p) {
        const int w_row = p.paired_w_row();
        return TileSource{p.row_tile * kTileM, &map_wz, w_row, scales.w_z + w_row};
      },
      [&](int e, const Place& p, uint32_t parity) {
        norm_epilogue(sm, a, e, p.row_tile * kTileM, p.col_tile * kPairCols, parity);
      },
      scales.h);
}

// The arguments checked and the launch, once h's and w_z's maps are made (bf16 or FP8).
template <bool kFp8>
cudaError_t launch_z_gated(const CUtensorMap& map_h, const CUtensorMap& map_wz, const bf16* o,
                           const bf16* w, bf16* out, const Fp8Blocks& out8, int64_t M, int64_t Vd,
                           int64_t K, float eps, const ZScales& scales, cudaStream_t stream) {
  NormArgs a;
  a.o = o;
  a.w = w;
  a.out = out;
  a.out8 = out8;
  a.M = int(M);
  a.Vd = int(Vd);
  a.eps = eps;
  const int64_t units = cluster_units((M + kTileM - 1) / kTileM, Vd / kPairCols);
  return launch<z_gated_rmsnorm_kernel<kFp8>>(units, stream, map_h, map_wz, a, int(K),
                                              unit_group(Vd * K * kOperandBytes<kFp8>), scales);
}

// The kernel's row and column arithmetic is int.
bool sizes_fit(int64_t M, int64_t Vd) {
  return rows_fit(M) && Vd <= INT32_MAX;
}

}  // namespace

bool z_gated_rmsnorm_supported(const void* h, const void* w_z, const void* o, const void* w,
                               const void* out, int64_t Vd, int64_t K, int64_t head_dim) {
  return head_dim == kHeadDim && detail::aligned16(h) && detail::aligned16(w_z) &&
         detail::aligned16(o) && detail::aligned16(w) && detail::aligned16(out) &&
         Vd % kPairCols == 0 && K > 0 && K % 8 == 0;
}

cudaError_t z_gated_rmsnorm(const bf16* h, const bf16* w_z, const bf16* o, const bf16* w, bf16* out,
                            int64_t M, int64_t Vd, int64_t K, int64_t head_dim, float eps,
                            cudaStream_t stream) {
  if (M == 0 || Vd == 0) return cudaSuccess;
  if (!z_gated_rmsnorm_supported(h, w_z, o, w, out, Vd, K, head_dim) || !sizes_fit(M, Vd))
    return cudaErrorInvalidValue;
  CUtensorMap map_h, map_wz;
  cudaError_t err = tile_map(map_h, h, M, K);
  if (err == cudaSuccess) err = tile_map(map_wz, w_z, Vd, K);
  if (err != cudaSuccess) return err;
  return launch_z_gated<false>(map_h, map_wz, o, w, out, {}, M, Vd, K, eps, {}, stream);
}

cudaError_t z_gated_rmsnorm_fp8(Fp8Rows h, Fp8Rows w_z, const bf16* o, const bf16* w, bf16* out,
                                Fp8Blocks out8, int64_t M, int64_t Vd, int64_t K, int64_t head_dim,
                                float eps, cudaStream_t stream) {
  if (M == 0 || Vd == 0) return cudaSuccess;
  const void* written = out8.data ? static_cast<const void*>(out8.data) : out;
  if (!z_gated_rmsnorm_supported(h.data, w_z.data, o, w, written, Vd, K, head_dim) ||
      !sizes_fit(M, Vd) || !fp8_scales_ok(K, h.scale, {w_z.scale}) || (out8.data && !out8.scale))
    return cudaErrorInvalidValue;
  CUtensorMap map_h, map_wz;
  cudaError_t err = detail::tile_map_fp8(map_h, h.data, M, K);
  if (err == cudaSuccess) err = detail::tile_map_fp8(map_wz, w_z.data, Vd, K);
  if (err != cudaSuccess) return err;
  return launch_z_gated<true>(map_h, map_wz, o, w, out, out8, M, Vd, K, eps,
                              ZScales{{h.scale, int(M)}, w_z.scale}, stream);
}

}  // namespace flide::kernels
