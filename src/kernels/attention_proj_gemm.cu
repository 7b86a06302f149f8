// A gated attention layer's query, key and value projections in one GEMM (tma_gemm.cuh), with the
// query and key heads' RMS norm and partial RoPE in its epilogue: what the three matmuls,
// attention_query and attention_key compute unfused (dense.h attention_prep), rounded alike, bit
// for bit (the products rounded to bf16, then rope_norm.cuh's steps).
//
// Why: unfused, the query side reads the product's query halves back and writes them again
// (attention_prep: ~100 us a layer of a QuALITY round of 4 on the 0.8B model, 2 TB/s with its
// occupancy held down by its registers), the keys likewise in place (~35 us), and k and v are two
// products of 512 columns. Here the heads are normed and turned while they sit in shared memory,
// beside the next tile's products, and leave once: 419 us a layer where the unfused steps took
// ~520 (bench/results/2026-12-02-attention-projections.md).
//
// Tiles: a unit's 256 columns (tma_gemm.cuh: two weight tiles of 128) are one head of head_dim
// 256, one of four parts: the query of head h (rows [2h, 2h + 1) x 256 of w_q, normed and turned
// into q), its gate (the next 256 rows, copied into gate), a key head (normed and turned into k) or
// a value head (copied into v); the normed parts' tiles come first (Unit). On a query or key tile
// the epilogue's seven warps each walk a seventh of the 128 rows, a warp's 32 lanes holding a
// row's 256 values, 8 each (attention_prep's layout), four rows at a time; the normed values go
// back into the staged tile, where lane i turns the pair (i, i + rot / 2) of each row. Every tile
// then leaves as four bulk tensor stores.
#include "kernels/dense.h"
#include "kernels/rope_norm.cuh"
#include "kernels/tma_gemm.cuh"

namespace flide::kernels {
namespace {

using namespace tma_gemm;
using detail::Raw;

constexpr int kHeadDim = kPairCols;  // a head is a unit's columns
constexpr int kVec = 8;              // values a lane: one 16-byte access
constexpr int kEpilogueWarps = kEpilogueThreads / 32;
constexpr int kRowsPerWarp = (kTileM + kEpilogueWarps - 1) / kEpilogueWarps;
constexpr int kMaxTurns = kHeadDim / 2 / 32;  // RoPE pairs a lane turns at most
static_assert(kHeadDim == 32 * kVec, "a warp's lanes hold one head");
static_assert(kRowsPerWarp <= 32, "a lane holds one row's position");

// The bulk copies' maps: the input, the three weights, the four outputs.
struct Maps {
  CUtensorMap x, w_q, w_k, w_v, q, gate, k, v;
};

struct ProjArgs {
  const bf16* q_norm;  // [256]
  const bf16* k_norm;  // [256]
  const int32_t* positions;
  int M, heads_q, heads_kv, rot;
  float eps, theta;
};

// FP8 operands: h's row scales and the three weights' (unused with bf16).
struct ProjScales {
  RowScales x;
  const float* w_q = nullptr;
  const float* w_k = nullptr;
  const float* w_v = nullptr;
};

enum class Part : uint8_t { Part_query, Part_gate, Part_key, Part_value };

// Which part and head a column tile is: the query heads, the key heads, the gates, the value
// heads. The normed parts come first so that a CTA's units take turns between them and the copied
// ones: a cluster walks column tiles a grid's worth of clusters apart, and by an even stride
// query and gate heads in turn would give one CTA every query, another every gate.
struct Unit {
  Part part;
  int head;
  __device__ Unit(int col_tile, const ProjArgs& a) {
    const int normed = a.heads_q + a.heads_kv, c = col_tile < normed ? col_tile : col_tile - normed;
    if (c < a.heads_q)
      part = col_tile < normed ? Part::Part_query : Part::Part_gate, head = c;
    else
      part = col_tile < normed ? Part::Part_key : Part::Part_value, head = c - a.heads_q;
  }
  __device__ bool normed() const { return part == Part::Part_query || part == Part::Part_key; }
  // The unit's 256 rows of its weight: w_q holds per head [query | gate].
  __device__ int weight_tile() const {
    return part == Part::Part_query ? 2 * head : part == Part::Part_gate ? 2 * head + 1 : head;
  }
};

// Shared-memory address of value d of staged row i: values [0, 128) are product 0, the rest
// product 1; d a multiple of 8 addresses a 16-byte unit, any other d lies 2 (d % 8) bytes into
// its unit.
__device__ __forceinline__ uint32_t staged_at(uint32_t staged, int i, int d) {
  return wgmma::swizzled(staged + uint32_t(d / kTileN) * kOutBytes, kTileM, i, d % kTileN & ~7) +
         2u * uint32_t(d % 8);
}
__device__ __forceinline__ float ld_shared_bf16(uint32_t addr) {
  unsigned short u;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(u) : "r"(addr) : "memory");
  return __uint_as_float(uint32_t(u) << 16);
}
__device__ __forceinline__ void st_shared_bf16(uint32_t addr, float x) {
  const unsigned short u = __bfloat16_as_ushort(__float2bfloat16_rn(x));
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(addr), "h"(u) : "memory");
}

// kRows staged rows from row i on, normed with weight 1 + w in place (their chains interleaved).
template <int kRows>
__device__ __forceinline__ void norm_rows(uint32_t staged, int i, int d0, const float (&w)[kVec],
                                          float eps) {
  Raw<kVec> raw[kRows];
#pragma unroll
  for (int q = 0; q < kRows; ++q) ld_shared16(staged_at(staged, i + q, d0), raw[q].h);
  float x[kRows][kVec];
  detail::head_rmsnorm8(raw, w, kHeadDim, eps, x);
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
#pragma unroll
    for (int v = 0; v < kVec / 2; ++v)
      raw[q].h[v] = detail::pack_bf16(x[q][2 * v], x[q][2 * v + 1]);
    st_shared16(staged_at(staged, i + q, d0), raw[q].h);
  }
}

// kRows normed staged rows from row i on, the pair (p, p + half) of each turned in place where
// the lane turns one; pos_lane: lane j holds row i_begin + j's position. Every lane calls it (the
// positions' shuffles).
template <int kRows>
__device__ __forceinline__ void turn_rows(uint32_t staged, int i, int i_begin, int p, int half,
                                          bool turns, float inv_freq, int pos_lane) {
  float pos[kRows];
#pragma unroll
  for (int q = 0; q < kRows; ++q)
    pos[q] = float(__shfl_sync(0xffffffffu, pos_lane, i + q - i_begin));
  if (!turns) return;
  float x1[kRows], x2[kRows];
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    x1[q] = ld_shared_bf16(staged_at(staged, i + q, p));
    x2[q] = ld_shared_bf16(staged_at(staged, i + q, p + half));
  }
#pragma unroll
  for (int q = 0; q < kRows; ++q) detail::rope_turn(pos[q], inv_freq, x1[q], x2[q]);
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    st_shared_bf16(staged_at(staged, i + q, p), x1[q]);
    st_shared_bf16(staged_at(staged, i + q, p + half), x2[q]);
  }
}

constexpr int kRowStep = 4;  // rows whose chains interleave

// The epilogue warps on a query or key tile staged for rows [m0, m0 + 128): each of the warp's
// rows [i_begin, i_end) normed with weight 1 + w, then its first rot values turned, in place.
// inv_freq[j]: pair lane + 32 j's; pos_lane: as turn_rows takes it.
__device__ __forceinline__ void norm_and_turn(const Smem& sm, const ProjArgs& a, const bf16* w,
                                              const float (&inv_freq)[kMaxTurns], int lane,
                                              int i_begin, int i_end, int pos_lane) {
  float wv[kVec];
  detail::load8(w + kVec * lane, kVec, true, wv);
  int i = i_begin;
  for (; i + kRowStep <= i_end; i += kRowStep)
    norm_rows<kRowStep>(sm.staged, i, kVec * lane, wv, a.eps);
  for (; i < i_end; ++i) norm_rows<1>(sm.staged, i, kVec * lane, wv, a.eps);
  __syncwarp();  // the rows' normed values, seen by the lanes that turn them
  const int half = a.rot / 2;
#pragma unroll
  for (int j = 0; j < kMaxTurns; ++j) {
    const int p = lane + 32 * j;
    if (j * 32 >= half) break;  // warp-uniform: the shuffles need every lane
    const bool turns = p < half;
    i = i_begin;
    for (; i + kRowStep <= i_end; i += kRowStep)
      turn_rows<kRowStep>(sm.staged, i, i_begin, p, half, turns, inv_freq[j], pos_lane);
    for (; i < i_end; ++i)
      turn_rows<1>(sm.staged, i, i_begin, p, half, turns, inv_freq[j], pos_lane);
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1)
    attention_proj_kernel(const __grid_constant__ Maps maps, const ProjArgs a, int K, int group,
                          const ProjScales scales) {
  extern __shared__ unsigned char smem_raw[];
  const Smem sm = Smem::carve(smem_raw);
  float inv_freq[kMaxTurns];  // the epilogue's, once for every tile
#pragma unroll
  for (int j = 0; j < kMaxTurns; ++j) {
    const int p = int(threadIdx.x) % 32 + 32 * j;
    inv_freq[j] = p < a.rot / 2 ? detail::rope_inv_freq(p, a.rot, a.theta) : 0.f;
  }
  run_units<kFp8>(
      sm, &maps.x, (a.M + kTileM - 1) / kTileM, 2 * (a.heads_q + a.heads_kv), group, K,
      [&](const Place& p) {
        const Unit u(p.col_tile, a);
        const bool key = u.part == Part::Part_key, value = u.part == Part::Part_value;
        const CUtensorMap* w = key ? &maps.w_k : value ? &maps.w_v : &maps.w_q;
        const float* w_scale = key ? scales.w_k : value ? scales.w_v : scales.w_q;
        const int w_row = u.weight_tile() * kPairCols + int(p.rank) * kTileN;
        return TileSource{p.row_tile * kTileM, w, w_row, w_scale + w_row};
      },
      [&](int e, const Place& p, uint32_t parity) {
        const Unit u(p.col_tile, a);
        const int m0 = p.row_tile * kTileM, warp = e / 32, lane = e % 32;
        const int i_begin = warp * kRowsPerWarp;
        const int i_end = min(min(kTileM, i_begin + kRowsPerWarp), a.M - m0);
        // The rows' positions load beside the products: one row's load in its chain held it.
        const int pos_lane =
            u.normed() && i_begin + lane < i_end ? a.positions[m0 + i_begin + lane] : 0;
        bar_wait(sm.staged_full, parity);
        if (u.normed())
          norm_and_turn(sm, a, u.part == Part::Part_query ? a.q_norm : a.k_norm, inv_freq, lane,
                        i_begin, i_end, pos_lane);
        const CUtensorMap* out = u.part == Part::Part_query  ? &maps.q
                                 : u.part == Part::Part_gate ? &maps.gate
                                 : u.part == Part::Part_key  ? &maps.k
                                                             : &maps.v;
        sm.send_staged(out, e, m0, u.head * kHeadDim, 4);  // the head's 256 columns
      },
      scales.x);
  // The outputs' last bulk stores finish before the CTA does.
  if (epilogue_index() == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// The outputs' maps and the launch, once the input's and weights' maps are in `maps` (bf16 or
// FP8).
template <bool kFp8>
cudaError_t launch_projections(Maps& maps, const ProjArgs& a, bf16* q, bf16* gate, bf16* k, bf16* v,
                               int64_t K, const ProjScales& scales, cudaStream_t stream) {
  const int64_t M = a.M, Cq = int64_t(a.heads_q) * kHeadDim, Ckv = int64_t(a.heads_kv) * kHeadDim;
  cudaError_t err = tile_map(maps.q, q, M, Cq);
  if (err == cudaSuccess) err = tile_map(maps.gate, gate, M, Cq);
  if (err == cudaSuccess) err = tile_map(maps.k, k, M, Ckv);
  if (err == cudaSuccess) err = tile_map(maps.v, v, M, Ckv);
  if (err != cudaSuccess) return err;
  const int64_t col_tiles = 2 * (int64_t(a.heads_q) + a.heads_kv);
  const int64_t units = cluster_units((M + kTileM - 1) / kTileM, col_tiles);
  return launch<attention_proj_kernel<kFp8>>(
      units, stream, maps, a, int(K), unit_group(col_tiles * kHeadDim * K * kOperandBytes<kFp8>),
      scales);
}

}  // namespace

bool attention_projections_supported(const void* h, const void* w_q, const void* w_k,
                                     const void* w_v, const void* q_norm, const void* k_norm,
                                     const void* q, const void* gate, const void* k, const void* v,
                                     int64_t K, int head_dim, int rot_dim) {
  for (const void* p : {h, w_q, w_k, w_v, q_norm, k_norm, q, gate, k, v})
    if (!detail::aligned16(p)) return false;
  return head_dim == kHeadDim && K > 0 && K % 8 == 0 && rot_dim > 0 && rot_dim % 2 == 0 &&
         rot_dim <= head_dim;
}

cudaError_t attention_projections(const bf16* h, const bf16* w_q, const bf16* w_k, const bf16* w_v,
                                  const bf16* q_norm, const bf16* k_norm, const int32_t* positions,
                                  bf16* q, bf16* gate, bf16* k, bf16* v, int64_t M, int64_t K,
                                  int heads_q, int heads_kv, int head_dim, int rot_dim, float eps,
                                  float theta, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  // The kernel's row arithmetic is int: M plus a tile pair must fit.
  if (!attention_projections_supported(h, w_q, w_k, w_v, q_norm, k_norm, q, gate, k, v, K, head_dim,
                                       rot_dim) ||
      heads_q <= 0 || heads_kv <= 0 || !rows_fit(M) || !positions)
    return cudaErrorInvalidValue;
  const int64_t Cq = int64_t(heads_q) * kHeadDim, Ckv = int64_t(heads_kv) * kHeadDim;
  Maps maps;
  cudaError_t err = tile_map(maps.x, h, M, K);
  if (err == cudaSuccess) err = tile_map(maps.w_q, w_q, 2 * Cq, K);
  if (err == cudaSuccess) err = tile_map(maps.w_k, w_k, Ckv, K);
  if (err == cudaSuccess) err = tile_map(maps.w_v, w_v, Ckv, K);
  if (err != cudaSuccess) return err;
  const ProjArgs a{q_norm, k_norm, positions, int(M), heads_q, heads_kv, rot_dim, eps, theta};
  return launch_projections<false>(maps, a, q, gate, k, v, K, {}, stream);
}

cudaError_t attention_projections_fp8(Fp8Rows h, Fp8Rows w_q, Fp8Rows w_k, Fp8Rows w_v,
                                      const bf16* q_norm, const bf16* k_norm,
                                      const int32_t* positions, bf16* q, bf16* gate, bf16* k,
                                      bf16* v, int64_t M, int64_t K, int heads_q, int heads_kv,
                                      int head_dim, int rot_dim, float eps, float theta,
                                      cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (!attention_projections_supported(h.data, w_q.data, w_k.data, w_v.data, q_norm, k_norm, q,
                                       gate, k, v, K, head_dim, rot_dim) ||
      !fp8_scales_ok(K, h.scale, {w_q.scale, w_k.scale, w_v.scale}) || heads_q <= 0 ||
      heads_kv <= 0 || !rows_fit(M) || !positions)
    return cudaErrorInvalidValue;
  const int64_t Cq = int64_t(heads_q) * kHeadDim, Ckv = int64_t(heads_kv) * kHeadDim;
  Maps maps;
  cudaError_t err = detail::tile_map_fp8(maps.x, h.data, M, K);
  if (err == cudaSuccess) err = detail::tile_map_fp8(maps.w_q, w_q.data, 2 * Cq, K);
  if (err == cudaSuccess) err = detail::tile_map_fp8(maps.w_k, w_k.data, Ckv, K);
  if (err == cudaSuccess) err = detail::tile_map_fp8(maps.w_v, w_v.data, Ckv, K);
  if (err != cudaSuccess) return err;
  const ProjArgs a{q_norm, k_norm, positions, int(M), heads_q, heads_kv, rot_dim, eps, theta};
  const ProjScales scales{{h.scale, int(M)}, w_q.scale, w_k.scale, w_v.scale};
  return launch_projections<true>(maps, a, q, gate, k, v, K, scales, stream);
}

}  // namespace flide::kernels
