// The Gated DeltaNet layer's q, k, v projection and its conv in one GEMM over one tree level:
// q, k, v = split(conv_silu(x W^T)) with each q / k head L2-normed, what the projection (a
// matmul) and gdn_conv compute unfused, and in the same rounding: the product rounded to bf16,
// then gdn_conv's per-row steps (gdn_conv_row.cuh).
//
// Why: unfused, the product writes the packed projection [T, C] (C = 2 Kd + Vd) and the conv
// reads it back: 2 C bf16 of traffic a row, and the conv kernel (~7% of a QuALITY round on the
// 0.8B model) ran apart from the tensor cores. Here the conv runs in the GEMM's epilogue warps
// (tma_gemm.cuh) beside the next tile's products, and the projection never leaves the SM: 10.6
// ms a round of 4 QuALITY requests against 12.3 for cuBLASLt's product and the conv kernel
// (bench/results/2026-11-30-fused-gdn-conv.md). The epilogue still sets the pace (the products
// alone took 7.2 ms): with three warps it took 13.2 ms.
//
// Tiles: the depthwise conv reads each channel's K-1 = 3 previous rows, so a tile of 128 product
// rows gives 125 outputs: rows [row0 - 3, row0 + 125) of x are multiplied, row0 = the level's
// first row + 125 t for row tile t. The 3 rows above are computed twice (2.4% more products);
// no tile waits for another's. The level's rows are contiguous in the stream (backend/stream.h)
// and are read on the device from meta, so a launch's shape depends only on the capacity (graph
// capture). A tile pair's columns are two heads of the projection (2 x 128 channels: CTA 0 copies
// the first weight tile, CTA 1 the second); q and k heads are exactly a tile's 128 columns.
//
// The epilogue's seven warps each walk a seventh of the tile's 125 rows; a warp's 32 lanes hold
// the tile's 256 channels, 8 each (16 lanes a head, the lane groups of gdn_conv's q/k norm for
// Dk = 128). A warp walks its rows node by node (token_node): a row's taps before its node's
// first row come from the node's slot_in window (zeros without one), and the warp that reaches a
// node's last row writes its slot_out window (the last 3 inputs of the node's path). A node that
// reads and writes the same window slot would race between tiles here: the caller runs those
// levels unfused (gdn_conv gives each node's channels to one thread).
#include "kernels/gdn.h"
#include "kernels/gdn_conv_row.cuh"
#include "kernels/tma_gemm.cuh"

namespace flide::kernels {

using bf16 = __nv_bfloat16;

namespace {

using namespace tma_gemm;
using detail::load_raw;
using detail::Raw;
using detail::zero_raw;

constexpr int kConvK = 4, kHalo = kConvK - 1, kRowsOut = kTileM - kHalo;
constexpr int kHeadDim = kTileN;                // a q or k head is a tile's columns
constexpr int kVec = 8;                         // channels a lane: one 16-byte access
constexpr int kLanesPerHead = kHeadDim / kVec;  // the norm's lane group
constexpr int kEpilogueWarps = kEpilogueThreads / 32;
constexpr int kRowsPerWarp = (kRowsOut + kEpilogueWarps - 1) / kEpilogueWarps;
struct ConvArgs {
  const bf16* w_conv;  // [C, 4]
  bf16* window;        // [slots, 3 C]
  bf16* q;             // [T, Kd]
  bf16* k;             // [T, Kd]
  bf16* v;             // [T, Vd]
  int Kd, Vd, C;
  float eps;
  int level;
  TreeMeta meta;
};

// The level's stream rows [first, end), read on the device.
struct LevelRows {
  int first = 0, end = 0;
  __device__ explicit LevelRows(const ConvArgs& a) {
    const int nb = a.meta.level_begin[a.level], ne = a.meta.level_begin[a.level + 1];
    if (nb >= ne) return;
    first = a.meta.node_offset[nb];
    end = a.meta.node_offset[ne - 1] + a.meta.node_length[ne - 1];
  }
};

// Rows 0 .. kRows - 1 of win's window (row q's inputs: win[q .. q + 3]) through the conv and
// SiLU into y. Rows are handled kRows at a time so that their chains (the conv's FMAs, SiLU's
// MUFU, the norm's shuffles, the store) interleave: one row alone leaves the warp mostly waiting.
template <int kRows>
__device__ __forceinline__ void conv_silu_rows(const Raw<kVec> (&win)[kConvK + 1],
                                               const detail::Bf16Taps<kConvK, kVec>& wt,
                                               Raw<kVec> (&y)[kRows]) {
#pragma unroll
  for (int q = 0; q < kRows; ++q)
    y[q] = detail::conv_silu<kConvK, kVec>(
        wt, [&](int j, int v) { return detail::raw_at(win[q + j], v); });
}

// conv_silu_rows' rows to out + q ld, on q / k tiles (norm_warp) each head L2-normed.
template <int kRows>
__device__ __forceinline__ void store_rows(const Raw<kVec> (&y)[kRows], bool norm_warp, float eps,
                                           bf16* out, int ld) {
  if (norm_warp) {  // warp-uniform: q and k tiles (whose every channel is normed)
    float sum_sq[kRows];
    detail::group_sum_sq_rows(y, kLanesPerHead, sum_sq);
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      const float s = rsqrtf(sum_sq[q] + eps);
      Raw<kVec> normed;
#pragma unroll
      for (int h = 0; h < kVec / 2; ++h)
        normed.h[h] =
            detail::pack_bf16(detail::raw_at(y[q], 2 * h) * s, detail::raw_at(y[q], 2 * h + 1) * s);
      detail::store_raw<kVec>(out + int64_t(q) * ld, normed);
    }
  } else {
#pragma unroll
    for (int q = 0; q < kRows; ++q) detail::store_raw<kVec>(out + int64_t(q) * ld, y[q]);
  }
}

// The epilogue warps on one tile pair's staged product: output rows [row0, row0 + 125) of the
// level (the product's rows 3..127), channels [n0, n0 + 256).
__device__ __forceinline__ void conv_epilogue(const Smem& sm, const ConvArgs& a, int e, int row0,
                                              int level_end, int n0, uint32_t parity) {
  const int warp = e / 32, lane = e % 32;
  const int head = lane / kLanesPerHead, col = (lane % kLanesPerHead) * kVec;
  const int c = n0 + head * kHeadDim + col;  // this lane's first channel
  const bool qk = c < 2 * a.Kd, norm_warp = n0 < 2 * a.Kd;
  const uint32_t staged = sm.staged + uint32_t(head) * kOutBytes;
  bf16* out;  // channel c of row 0 in q, k or v
  int ld;
  if (c < a.Kd) {
    out = a.q + c, ld = a.Kd;
  } else if (qk) {
    out = a.k + (c - a.Kd), ld = a.Kd;
  } else {
    out = a.v + (c - 2 * a.Kd), ld = a.Vd;
  }
  // The lane's taps: the 64 contiguous bytes of w_conv [C, 4] for its 8 channels, kept as bf16
  // (as fp32 they pushed the epilogue past its 96 registers: spills in the row loop).
  detail::Bf16Taps<kConvK, kVec> wt;
  {
    const uint4* src = reinterpret_cast<const uint4*>(a.w_conv + int64_t(c) * kConvK);
#pragma unroll
    for (int u = 0; u < kConvK * kVec / 8; ++u) {
      const uint4 raw = src[u];
      wt.w[4 * u] = raw.x, wt.w[4 * u + 1] = raw.y, wt.w[4 * u + 2] = raw.z,
               wt.w[4 * u + 3] = raw.w;
    }
  }
  auto staged_row = [&](int p) {  // product row p of the tile (stream row row0 - 3 + p)
    Raw<kVec> r;
    ld_shared16(wgmma::swizzled(staged, kTileM, p, col), r.h);
    return r;
  };
  bar_wait(sm.staged_full, parity);
  const int i_end = min(min(kRowsOut, (warp + 1) * kRowsPerWarp), level_end - row0);
  for (int i = warp * kRowsPerWarp; i < i_end;) {
    const int r = row0 + i, n = a.meta.token_node[r];
    const int off = a.meta.node_offset[n], len = a.meta.node_length[n];
    const int seg_end = min(i_end, off + len - row0);
    const int slot_in = a.meta.node_slot_in[n], slot_out = a.meta.node_slot_out[n];
    // The inputs of rows r - 3 .. r + 1 as they were staged (bf16), oldest first. A pair's own
    // rows are loaded at the end of the pair before (with the tensor cores reading shared memory
    // beside them, a staged load held a warp ~480 cycles: 2026-12-01-fused-epilogues.md);
    // loaded before that pair's norm, they spilled.
    Raw<kVec> win[kConvK + 1];
#pragma unroll
    for (int j = 0; j < kHalo; ++j) {
      const int s = r - kHalo + j;
      win[j] =
          s >= off ? staged_row(s - row0 + kHalo)
          : slot_in >= 0
              ? load_raw<kVec>(a.window + (int64_t(slot_in) * kHalo + kHalo + s - off) * a.C + c)
              : zero_raw<kVec>();
    }
    // Past the tile's last product row a load is clamped to it and its value unused.
    auto staged_ahead = [&](int p) { return staged_row(min(p + kHalo, kTileM - 1)); };
    win[kHalo] = staged_ahead(i), win[kHalo + 1] = staged_ahead(i + 1);
    for (; i + 1 < seg_end; i += 2) {
      Raw<kVec> y[2];
      conv_silu_rows<2>(win, wt, y);
#pragma unroll
      for (int j = 0; j < kHalo; ++j) win[j] = win[j + 2];
      store_rows<2>(y, norm_warp, a.eps, out + int64_t(row0 + i) * ld, ld);
      win[kHalo] = staged_ahead(i + 2), win[kHalo + 1] = staged_ahead(i + 3);
    }
    if (i < seg_end) {  // an odd segment's last row (its input: win[3])
      Raw<kVec> y[1];
      conv_silu_rows<1>(win, wt, y);
#pragma unroll
      for (int j = 0; j < kHalo; ++j) win[j] = win[j + 1];
      store_rows<1>(y, norm_warp, a.eps, out + int64_t(row0 + i) * ld, ld);
      ++i;
    }
    if (slot_out >= 0 && off + len == row0 + seg_end) {  // the node's last row was this warp's
      bf16* dst = a.window + int64_t(slot_out) * kHalo * a.C + c;
#pragma unroll
      for (int j = 0; j < kHalo; ++j) detail::store_raw<kVec>(dst + int64_t(j) * a.C, win[j]);
    }
  }
  sm.release_staged(e);
}

ConvArgs conv_args(const bf16* w_conv, bf16* window, bf16* q, bf16* k, bf16* v, int heads_k,
                   int dim_k, int64_t value_dim, float eps, int level, const TreeMeta& meta) {
  ConvArgs a;
  a.w_conv = w_conv;
  a.window = window;
  a.q = q;
  a.k = k;
  a.v = v;
  a.Kd = heads_k * dim_k;
  a.Vd = int(value_dim);
  a.C = 2 * a.Kd + a.Vd;
  a.eps = eps;
  a.level = level;
  a.meta = meta;
  return a;
}

// FP8 operands: x's row scales and w_qkv's (unused with bf16).
struct ConvScales {
  RowScales x;
  const float* w = nullptr;
};

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_qkv_conv_kernel(const __grid_constant__ CUtensorMap map_x,
                        const __grid_constant__ CUtensorMap map_w, const ConvArgs a, int H,
                        int group, const ConvScales scales) {
  extern __shared__ unsigned char smem_raw[];
  const Smem sm = Smem::carve(smem_raw);
  const LevelRows rows(a);
  auto row0_of = [&](const Place& p) { return rows.first + p.row_tile * kRowsOut; };
  run_units<kFp8>(
      sm, &map_x, (rows.end - rows.first + kRowsOut - 1) / kRowsOut, a.C / kPairCols, group, H,
      [&](const Place& p) {
        const int w_row = p.paired_w_row();
        return TileSource{row0_of(p) - kHalo, &map_w, w_row, scales.w + w_row};
      },
      [&](int e, const Place& p, uint32_t parity) {
        conv_epilogue(sm, a, e, row0_of(p), rows.end, p.col_tile * kPairCols, parity);
      },
      scales.x);
}

// The arguments checked and the launch, once x's and w_qkv's maps are made (bf16 or FP8).
template <bool kFp8>
cudaError_t launch_qkv_conv(const CUtensorMap& map_x, const CUtensorMap& map_w, ConvArgs a,
                            int64_t T, int64_t H, const ConvScales& scales, cudaStream_t stream) {
  // Enough clusters for the largest level the stream's rows allow (the level's own size is read
  // on the device).
  const int64_t units = cluster_units((T + kRowsOut - 1) / kRowsOut, a.C / kPairCols);
  return launch<gdn_qkv_conv_kernel<kFp8>>(units, stream, map_x, map_w, a, int(H),
                                           unit_group(int64_t(a.C) * H * kOperandBytes<kFp8>),
                                           scales);
}

}  // namespace

bool gdn_qkv_conv_supported(const void* x, const void* w_qkv, const void* w_conv,
                            const void* window, const void* q, const void* k, const void* v,
                            int64_t H, int heads_k, int dim_k, int64_t value_dim, int K) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t C = 2 * int64_t(heads_k) * dim_k + value_dim;
  return aligned(x) && aligned(w_qkv) && aligned(w_conv) && aligned(window) && aligned(q) &&
         aligned(k) && aligned(v) && K == kConvK && dim_k == kHeadDim && heads_k > 0 &&
         value_dim > 0 && C % kPairCols == 0 && H > 0 && H % 8 == 0;
}

cudaError_t gdn_qkv_conv(const bf16* x, const bf16* w_qkv, const bf16* w_conv, bf16* window,
                         bf16* q, bf16* k, bf16* v, int64_t T, int64_t H, int heads_k, int dim_k,
                         int64_t value_dim, float eps, int level, const TreeMeta& meta,
                         cudaStream_t stream) {
  if (!gdn_qkv_conv_supported(x, w_qkv, w_conv, window, q, k, v, H, heads_k, dim_k, value_dim,
                              kConvK) ||
      level < 0 || !rows_fit(T))
    return cudaErrorInvalidValue;
  if (T == 0 || meta.n_tokens == 0 || meta.max_level_nodes == 0) return cudaSuccess;
  const ConvArgs a =
      conv_args(w_conv, window, q, k, v, heads_k, dim_k, value_dim, eps, level, meta);
  CUtensorMap map_x, map_w;
  cudaError_t err = tile_map(map_x, x, T, H);
  if (err == cudaSuccess) err = tile_map(map_w, w_qkv, a.C, H);
  if (err != cudaSuccess) return err;
  return launch_qkv_conv<false>(map_x, map_w, a, T, H, {}, stream);
}

cudaError_t gdn_qkv_conv_fp8(Fp8Rows x, Fp8Rows w_qkv, const bf16* w_conv, bf16* window, bf16* q,
                             bf16* k, bf16* v, int64_t T, int64_t H, int heads_k, int dim_k,
                             int64_t value_dim, float eps, int level, const TreeMeta& meta,
                             cudaStream_t stream) {
  if (!gdn_qkv_conv_supported(x.data, w_qkv.data, w_conv, window, q, k, v, H, heads_k, dim_k,
                              value_dim, kConvK) ||
      !fp8_scales_ok(H, x.scale, {w_qkv.scale}) || level < 0 || !rows_fit(T))
    return cudaErrorInvalidValue;
  if (T == 0 || meta.n_tokens == 0 || meta.max_level_nodes == 0) return cudaSuccess;
  const ConvArgs a =
      conv_args(w_conv, window, q, k, v, heads_k, dim_k, value_dim, eps, level, meta);
  CUtensorMap map_x, map_w;
  cudaError_t err = detail::tile_map_fp8(map_x, x.data, T, H);
  if (err == cudaSuccess) err = detail::tile_map_fp8(map_w, w_qkv.data, a.C, H);
  if (err != cudaSuccess) return err;
  return launch_qkv_conv<true>(map_x, map_w, a, T, H, ConvScales{{x.scale, int(T)}, w_qkv.scale},
                               stream);
}

}  // namespace flide::kernels
