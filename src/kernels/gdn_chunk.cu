// Chunked gated delta rule over one tree level (spec qwen3_5.md §4.1), the CUDA twin of the CPU
// reference's gdn_chunked_head. Three kernels (gdn.h describes them): a one-block plan listing
// the level's chunks, a fully parallel "prepare" per (chunk, value head) that does everything a
// chunk needs that does not depend on the state, and a "main" kernel per (node, value head,
// value-column slice) that walks the node's chunks in order through the state.
//
// Why this split: a node's chunks are sequential through the state, and one 5000-row trunk with
// 16 value heads gives only 16 sequences; the state columns are independent given W, U, P and
// gamma, so the main kernel splits Dv into slices of 32 columns (64 blocks for that trunk) and
// keeps its per-chunk work to four small products, all on tensor cores: v_new = U - W S,
// o = e (q S) + P v_new, S = d S + K^T (f v_new). The prepare kernel's 64x64 triangular inverse
// is done blockwise (16x16 diagonal blocks by forward substitution, then the off-diagonal blocks
// by small products), and its four products (K K^T, Q K^T, T K, T V) also use tensor cores.
//
// Tensor cores: mma.sync.m16n8k8 tf32 with fp32 accumulation. Fragment layout (PTX ISA), lane =
// 4 g + t: A (16x8) a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); B (8x8, k x n) b0 (t, g),
// b1 (t+4, g); C (16x8) c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1). Shared-memory
// leading dimensions are padded so that every fragment load below is free of bank conflicts for
// Dk = Dv = 128. Small head dims (test checkpoints) pad to whole tiles with zeros.
//
// Chunk rows past a node's end (its last chunk may be short) are zeros in shared memory (k, q, v,
// beta, g, W, U, P): they change neither the real rows' outputs nor the state, like HF's padding.
// Those rows are never written back: workspace rows are indexed by stream row.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/gdn.h"

namespace flide::kernels {

using bf16 = __nv_bfloat16;

namespace {

constexpr int kChunk = 64;  // HF chunk_size
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPlanThreads = 1024;

// ---------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
// bf16 has 8 significant bits: its fp32 widening is already a tf32 value.
__device__ __forceinline__ uint32_t bf16_tf32(bf16 h) {
  return uint32_t(__bfloat16_as_ushort(h)) << 16;
}

// d += a b
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A fragment of a row-major [m][k] tile; p = &A[m0][k0].
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const float* p, int ld, int g, int t) {
  a[0] = to_tf32(p[g * ld + t]);
  a[1] = to_tf32(p[(g + 8) * ld + t]);
  a[2] = to_tf32(p[g * ld + t + 4]);
  a[3] = to_tf32(p[(g + 8) * ld + t + 4]);
}
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const bf16* p, int ld, int g, int t) {
  a[0] = bf16_tf32(p[g * ld + t]);
  a[1] = bf16_tf32(p[(g + 8) * ld + t]);
  a[2] = bf16_tf32(p[g * ld + t + 4]);
  a[3] = bf16_tf32(p[(g + 8) * ld + t + 4]);
}
// A fragment of the transpose of a row-major [k][m] tile: A(m, k) = X[k][m]; p = &X[k0][m0].
__device__ __forceinline__ void frag_a_t(uint32_t (&a)[4], const bf16* p, int ld, int g, int t) {
  a[0] = bf16_tf32(p[t * ld + g]);
  a[1] = bf16_tf32(p[t * ld + g + 8]);
  a[2] = bf16_tf32(p[(t + 4) * ld + g]);
  a[3] = bf16_tf32(p[(t + 4) * ld + g + 8]);
}
// B fragment of a row-major [k][n] tile; p = &B[k0][n0].
__device__ __forceinline__ void frag_b(uint32_t (&b)[2], const float* p, int ld, int g, int t) {
  b[0] = to_tf32(p[t * ld + g]);
  b[1] = to_tf32(p[(t + 4) * ld + g]);
}
// Same with row k0 + t scaled by s0 and row k0 + t + 4 by s1.
__device__ __forceinline__ void frag_b(uint32_t (&b)[2], const float* p, int ld, int g, int t,
                                       float s0, float s1) {
  b[0] = to_tf32(p[t * ld + g] * s0);
  b[1] = to_tf32(p[(t + 4) * ld + g] * s1);
}
__device__ __forceinline__ void frag_b(uint32_t (&b)[2], const bf16* p, int ld, int g, int t,
                                       float s0, float s1) {
  b[0] = to_tf32(__bfloat162float(p[t * ld + g]) * s0);
  b[1] = to_tf32(__bfloat162float(p[(t + 4) * ld + g]) * s1);
}
// B fragment of the transpose of a row-major [n][k] tile: B(k, n) = X[n][k]; p = &X[n0][k0].
__device__ __forceinline__ void frag_b_t(uint32_t (&b)[2], const bf16* p, int ld, int g, int t) {
  b[0] = bf16_tf32(p[g * ld + t]);
  b[1] = bf16_tf32(p[g * ld + t + 4]);
}

template <int kBytes>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(kBytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
template <int kBytes>
__device__ __forceinline__ void zero_bytes(void* p) {
  if constexpr (kBytes == 16)
    *static_cast<uint4*>(p) = make_uint4(0u, 0u, 0u, 0u);
  else if constexpr (kBytes == 8)
    *static_cast<uint2*>(p) = make_uint2(0u, 0u);
  else
    *static_cast<uint32_t*>(p) = 0u;
}

// dst [kChunk][kLd] <- src rows r < nrows (row stride src_ld), columns c < cols, asynchronously;
// every other element of the first kCols columns is set to zero. cols % kVec == 0.
template <typename T, int kVec, int kCols, int kLd>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t src_ld, int nrows,
                                          int cols) {
  static_assert(kCols % kVec == 0, "whole vectors");
  constexpr int kVecs = kCols / kVec;
  constexpr int kBytes = kVec * int(sizeof(T));
  for (int i = threadIdx.x; i < kChunk * kVecs; i += kThreads) {
    const int r = i / kVecs, c = (i % kVecs) * kVec;
    T* d = dst + r * kLd + c;
    if (r < nrows && c < cols)
      cp_async<kBytes>(d, src + r * src_ld + c);
    else
      zero_bytes<kBytes>(d);
  }
}

// ---------------------------------------------------------------------------------------------
// Shapes and shared-memory layouts

template <int DK, int DV>
struct Cfg {
  static_assert(DK % 4 == 0 && DV % 4 == 0, "head dims are multiples of 4");
  static constexpr int kKp = (DK + 15) / 16 * 16;  // key dim padded to whole m16 tiles
  static constexpr int kVp = (DV + 7) / 8 * 8;     // value dim padded to whole n8 tiles
  static constexpr int kVb = kVp < 32 ? kVp : 32;  // value columns of one main block
  static constexpr int kSplits = (DV + kVb - 1) / kVb;
  static constexpr int kVecK = DK % 8 == 0 ? 8 : 4;  // bf16 elements per async copy
  static constexpr int kVecV = DV % 8 == 0 ? 8 : 4;
  // Leading dimensions (elements). fp32 A tiles: ld = 4 mod 32 words; fp32 B tiles:
  // ld = 8 mod 32 (or 24) words; bf16 tiles: ld / 2 = 4 mod 32 words.
  static constexpr int kLdH = kKp + 8;     // bf16 q, k rows
  static constexpr int kLdV = kVp + 8;     // bf16 v rows (prepare)
  static constexpr int kLdW = kKp + 4;     // fp32 W rows (main)
  static constexpr int kLdC = kChunk + 4;  // fp32 rows of 64: L, T, Y (prepare), P (main)
  static constexpr int kLdS = kVb + 8;     // fp32 rows of a slice: S, U, v_new (main)

  // prepare kernel (bytes)
  static constexpr int kPrepK = 0;
  static constexpr int kPrepQ = kPrepK + kChunk * kLdH * 2;
  static constexpr int kPrepV = kPrepQ + kChunk * kLdH * 2;
  static constexpr int kPrepL = kPrepV + kChunk * kLdV * 2;
  static constexpr int kPrepT = kPrepL + kChunk * kLdC * 4;
  static constexpr int kPrepY = kPrepT + kChunk * kLdC * 4;
  static constexpr int kPrepBeta = kPrepY + 16 * kLdC * 4;
  static constexpr int kPrepGam = kPrepBeta + kChunk * 4;
  static constexpr int kPrepBk = kPrepGam + kChunk * 4;
  static constexpr int kPrepBytes = kPrepBk + kChunk * 4;

  // main kernel: two stages (chunk c and c + 1 in flight), then S, v_new, f (bytes)
  static constexpr int kStW = 0;
  static constexpr int kStQ = kStW + kChunk * kLdW * 4;
  static constexpr int kStK = kStQ + kChunk * kLdH * 2;
  static constexpr int kStP = kStK + kChunk * kLdH * 2;
  static constexpr int kStU = kStP + kChunk * kLdC * 4;
  static constexpr int kStGam = kStU + kChunk * kLdS * 4;
  static constexpr int kStBytes = kStGam + kChunk * 4;
  static constexpr int kMainS = 2 * kStBytes;
  static constexpr int kMainVn = kMainS + kKp * kLdS * 4;
  static constexpr int kMainF = kMainVn + kChunk * kLdS * 4;
  static constexpr int kMainBytes = kMainF + kChunk * 4;

  static_assert(kPrepQ % 16 == 0 && kPrepV % 16 == 0 && kPrepL % 16 == 0 && kPrepY % 16 == 0 &&
                    kPrepBeta % 16 == 0 && kStQ % 16 == 0 && kStP % 16 == 0 && kStU % 16 == 0 &&
                    kStBytes % 16 == 0 && kMainVn % 16 == 0,
                "16-byte aligned regions for cp.async");
  static_assert(kMainBytes <= 227 * 1024, "main kernel shared memory");
};

// Workspace regions, carved identically by gdn_workspace_bytes and the launcher.
struct Workspace {
  float* W;      // [Hv][T][Dk]
  float* U;      // [Hv][T][Dv]
  float* P;      // [Hv][T][64]: row i of a chunk against the chunk's rows j (0 for j > i)
  float* gam;    // [Hv][T]: in-chunk cumulative g
  int2* chunks;  // [0].x: number of chunks of the level; [1 + c]: (node, first row in node)
};

struct WorkspaceLayout {
  size_t W, U, P, gam, chunks, total;
};

WorkspaceLayout workspace_layout(int64_t T, int heads_v, int dim_k, int dim_v) {
  auto round_up = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t rows = size_t(heads_v) * size_t(T);
  // chunks of a level <= sum over its nodes of (length / 64 + 1) <= T / 64 + T
  const size_t list = size_t(T) + size_t(T + kChunk - 1) / kChunk + 2;
  WorkspaceLayout l{};
  size_t o = 0;
  l.W = o, o += round_up(rows * size_t(dim_k) * 4);
  l.U = o, o += round_up(rows * size_t(dim_v) * 4);
  l.P = o, o += round_up(rows * kChunk * 4);
  l.gam = o, o += round_up(rows * 4);
  l.chunks = o, o += round_up(list * sizeof(int2));
  l.total = o;
  return l;
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
// Prepare: per (chunk, value head) gamma, P, W, U. Stride loop over items = chunk * Hv + head.

template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 2)
    gdn_prepare_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                       const bf16* __restrict__ v, const float* __restrict__ g,
                       const float* __restrict__ beta, Workspace ws, int heads_k, int heads_v,
                       float scale, TreeMeta meta) {
  using C = Cfg<DK, DV>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem + C::kPrepK);    // [64][kLdH] keys of the chunk
  bf16* Qs = reinterpret_cast<bf16*>(smem + C::kPrepQ);    // [64][kLdH] queries
  bf16* Vs = reinterpret_cast<bf16*>(smem + C::kPrepV);    // [64][kLdV] values
  float* Ls = reinterpret_cast<float*>(smem + C::kPrepL);  // [64][kLdC] -A (strictly lower)
  float* Ts = reinterpret_cast<float*>(smem + C::kPrepT);  // [64][kLdC] (I + A)^-1
  float* Ys = reinterpret_cast<float*>(smem + C::kPrepY);  // [16][kLdC] scratch of the inverse
  float* beta_s = reinterpret_cast<float*>(smem + C::kPrepBeta);  // [64]
  float* gam_s = reinterpret_cast<float*>(smem + C::kPrepGam);    // [64] cumulative g
  float* bk_s = reinterpret_cast<float*>(smem + C::kPrepBk);      // [64] beta exp(gamma)
  constexpr int kLdH = C::kLdH, kLdC = C::kLdC;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK, v_ld = int64_t(heads_v) * DV;
  const int group = heads_v / heads_k;
  const int items = ws.chunks[0].x * heads_v;

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int head = item % heads_v, kh = head / group;
    const int2 chunk = ws.chunks[1 + item / heads_v];
    const int nrows = min(kChunk, meta.node_length[chunk.x] - chunk.y);
    const int64_t t0 = int64_t(meta.node_offset[chunk.x]) + chunk.y;  // first stream row
    const int64_t hrow = int64_t(head) * T + t0;                      // workspace row of t0

    __syncthreads();  // the previous item is done with shared memory
    load_tile<bf16, C::kVecK, C::kKp, kLdH>(Ks, k + t0 * qk_ld + kh * DK, qk_ld, nrows, DK);
    load_tile<bf16, C::kVecK, C::kKp, kLdH>(Qs, q + t0 * qk_ld + kh * DK, qk_ld, nrows, DK);
    load_tile<bf16, C::kVecV, C::kVp, C::kLdV>(Vs, v + t0 * v_ld + head * DV, v_ld, nrows, DV);
    cp_async_commit();
    if (threadIdx.x < kChunk) {
      const int i = threadIdx.x;
      beta_s[i] = i < nrows ? beta[(t0 + i) * heads_v + head] : 0.f;
      gam_s[i] = i < nrows ? g[(t0 + i) * heads_v + head] : 0.f;
    }
    for (int i = threadIdx.x; i < kChunk * kChunk; i += kThreads)
      Ts[(i / kChunk) * kLdC + i % kChunk] = 0.f;
    cp_async_wait_all();
    __syncthreads();
    if (threadIdx.x == 0) {  // gamma_i = gamma_{i-1} + g_i, in the CPU's order
      float x[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) x[i] = gam_s[i];
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        acc += x[i];
        gam_s[i] = acc;
      }
    }
    __syncthreads();
    if (threadIdx.x < kChunk) {
      const int i = threadIdx.x;
      bk_s[i] = beta_s[i] * __expf(gam_s[i]);
      if (i < nrows) ws.gam[hrow + i] = gam_s[i];
    }

    // K K^T -> Ls = -(beta_i k_i.k_j exp(gamma_i - gamma_j)) for j < i;
    // Q K^T -> P = scale q_i.k_j exp(gamma_i - gamma_j) for j <= i (to the workspace).
    // Warp: rows 16 mt.., columns 32 nh.. (four n8 tiles).
    {
      const int mt = warp & 3, nt0 = (warp >> 2) * 4;
      float acc_k[4][4] = {}, acc_q[4][4] = {};
#pragma unroll
      for (int kk = 0; kk < C::kKp / 8; ++kk) {
        uint32_t ak[4], aq[4];
        frag_a(ak, Ks + 16 * mt * kLdH + 8 * kk, kLdH, g8, t4);
        frag_a(aq, Qs + 16 * mt * kLdH + 8 * kk, kLdH, g8, t4);
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          uint32_t b[2];
          frag_b_t(b, Ks + 8 * (nt0 + s) * kLdH + 8 * kk, kLdH, g8, t4);
          mma(acc_k[s], ak, b);
          mma(acc_q[s], aq, b);
        }
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int i = 16 * mt + g8 + 8 * h, j = 8 * (nt0 + s) + 2 * t4;
          float p[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float decay = j + e <= i ? __expf(gam_s[i] - gam_s[j + e]) : 0.f;
            Ls[i * kLdC + j + e] = j + e < i ? -(beta_s[i] * acc_k[s][2 * h + e] * decay) : 0.f;
            p[e] = j + e <= i ? scale * acc_q[s][2 * h + e] * decay : 0.f;
          }
          if (i < nrows)
            *reinterpret_cast<float2*>(ws.P + (hrow + i) * kChunk + j) = make_float2(p[0], p[1]);
        }
      }
    }
    __syncthreads();

    // T = (I - L)^-1, blockwise on 16x16 blocks. Diagonal blocks by forward substitution, one
    // column per thread (the CPU's order: T_ij = L_ij + sum_{j<m<i} L_im T_mj).
    if (threadIdx.x < kChunk) {
      const int col = threadIdx.x, b0 = col & ~15;
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const int i = b0 + r;
        float acc = i == col ? 1.f : 0.f;
#pragma unroll
        for (int m = 0; m < r; ++m) acc += Ls[i * kLdC + b0 + m] * Ts[(b0 + m) * kLdC + col];
        Ts[i * kLdC + col] = acc;
      }
    }
    // Block row b, columns c < 16 b: (I - L_bb) T_bc = sum_{e<b} L_be T_ec =: Y, T_bc = T_bb Y.
#pragma unroll
    for (int bb = 1; bb < 4; ++bb) {
      const int r0 = 16 * bb;
      __syncthreads();
      for (int e = threadIdx.x; e < 16 * r0; e += kThreads) {
        const int r = e / r0, c = e % r0;
        float y = 0.f;
        for (int m = c; m < r0; ++m) y += Ls[(r0 + r) * kLdC + m] * Ts[m * kLdC + c];
        Ys[r * kLdC + c] = y;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < 16 * r0; e += kThreads) {
        const int r = e / r0, c = e % r0;
        float acc = 0.f;
        for (int m = 0; m <= r; ++m) acc += Ts[(r0 + r) * kLdC + r0 + m] * Ys[m * kLdC + c];
        Ts[(r0 + r) * kLdC + c] = acc;
      }
    }
    __syncthreads();

    // W = T (beta exp(gamma) K) [64 x Dk], U = T (beta V) [64 x Dv]. Warp: rows 16 mt..,
    // n8 tiles nh, nh + 2, ...
    {
      const int mt = warp & 3, nh = warp >> 2;
      constexpr int kTilesW = C::kKp / 8, kTilesU = C::kVp / 8;
      float acc_w[(kTilesW + 1) / 2][4] = {};
      float acc_u[(kTilesU + 1) / 2][4] = {};
#pragma unroll
      for (int kk = 0; kk < kChunk / 8; ++kk) {
        uint32_t a[4];
        frag_a(a, Ts + 16 * mt * kLdC + 8 * kk, kLdC, g8, t4);
        const float fk0 = bk_s[8 * kk + t4], fk1 = bk_s[8 * kk + t4 + 4];
        const float fv0 = beta_s[8 * kk + t4], fv1 = beta_s[8 * kk + t4 + 4];
#pragma unroll
        for (int s = 0; s < (kTilesW + 1) / 2; ++s) {
          const int nt = nh + 2 * s;
          if (nt < kTilesW) {
            uint32_t b[2];
            frag_b(b, Ks + 8 * kk * kLdH + 8 * nt, kLdH, g8, t4, fk0, fk1);
            mma(acc_w[s], a, b);
          }
        }
#pragma unroll
        for (int s = 0; s < (kTilesU + 1) / 2; ++s) {
          const int nt = nh + 2 * s;
          if (nt < kTilesU) {
            uint32_t b[2];
            frag_b(b, Vs + 8 * kk * C::kLdV + 8 * nt, C::kLdV, g8, t4, fv0, fv1);
            mma(acc_u[s], a, b);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 16 * mt + g8 + 8 * h;
        if (i >= nrows) continue;
#pragma unroll
        for (int s = 0; s < (kTilesW + 1) / 2; ++s) {
          const int j = 8 * (nh + 2 * s) + 2 * t4;
          if (j < DK)
            *reinterpret_cast<float2*>(ws.W + (hrow + i) * DK + j) =
                make_float2(acc_w[s][2 * h], acc_w[s][2 * h + 1]);
        }
#pragma unroll
        for (int s = 0; s < (kTilesU + 1) / 2; ++s) {
          const int j = 8 * (nh + 2 * s) + 2 * t4;
          if (j < DV)
            *reinterpret_cast<float2*>(ws.U + (hrow + i) * DV + j) =
                make_float2(acc_u[s][2 * h], acc_u[s][2 * h + 1]);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Main: per (node, value head, slice of kVb value columns), the node's chunks in order. Stride
// loop over items = (node * Hv + head) * kSplits + split, so a head's slices run side by side and
// share their W, q, k, P reads in L2.

template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_main_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, float* state,
                    bf16* __restrict__ out, Workspace ws, int heads_k, int heads_v, int level,
                    float scale, TreeMeta meta) {
  using C = Cfg<DK, DV>;
  constexpr int kLdH = C::kLdH, kLdW = C::kLdW, kLdC = C::kLdC, kLdS = C::kLdS;
  constexpr int kTilesN = C::kVb / 8;                   // n8 tiles of the slice
  constexpr int kTilesS = C::kKp / 16;                  // m16 tiles of the state rows
  constexpr int kSa = (kTilesN + 1) / 2;                // phase A/B: n8 tiles per warp
  constexpr int kSm = (kTilesS + kWarps - 1) / kWarps;  // phase C: state m16 tiles per warp
  extern __shared__ __align__(16) unsigned char smem[];
  struct Stage {
    float* W;    // [64][kLdW]
    bf16* Q;     // [64][kLdH]
    bf16* K;     // [64][kLdH]
    float* P;    // [64][kLdC]
    float* U;    // [64][kLdS] the slice's columns
    float* gam;  // [64]
  };
  auto stage = [&](int b) {
    unsigned char* base = smem + b * C::kStBytes;
    return Stage{
        reinterpret_cast<float*>(base + C::kStW), reinterpret_cast<bf16*>(base + C::kStQ),
        reinterpret_cast<bf16*>(base + C::kStK),  reinterpret_cast<float*>(base + C::kStP),
        reinterpret_cast<float*>(base + C::kStU), reinterpret_cast<float*>(base + C::kStGam)};
  };
  float* Ss = reinterpret_cast<float*>(smem + C::kMainS);   // [kKp][kLdS] state entering a chunk
  float* Vn = reinterpret_cast<float*>(smem + C::kMainVn);  // [64][kLdS] v_new
  float* fs = reinterpret_cast<float*>(smem + C::kMainF);   // [64] exp(gamma_last - gamma_j)

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK, out_ld = int64_t(heads_v) * DV;
  const int64_t state_ld = int64_t(heads_v) * DK * DV;
  const int group = heads_v / heads_k;
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  const int items = (ne - nb) * heads_v * C::kSplits;

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int split = item % C::kSplits, head = (item / C::kSplits) % heads_v;
    const int node = nb + item / (C::kSplits * heads_v);
    const int kh = head / group, v0 = split * C::kVb, vcols = min(C::kVb, DV - v0);
    const int64_t off = meta.node_offset[node];
    const int len = meta.node_length[node];
    const int slot_in = meta.node_slot_in[node], slot_out = meta.node_slot_out[node];
    const int64_t state_head = int64_t(head) * DK * DV + v0;
    const int64_t hrow = int64_t(head) * T + off;  // workspace row of the node's first row
    const int n_chunks = (len + kChunk - 1) / kChunk;

    auto issue = [&](int ci, const Stage& st) {
      const int c0 = ci * kChunk, nrows = min(kChunk, len - c0);
      const int64_t t0 = off + c0;
      load_tile<float, 4, C::kKp, kLdW>(st.W, ws.W + (hrow + c0) * DK, DK, nrows, DK);
      load_tile<bf16, C::kVecK, C::kKp, kLdH>(st.Q, q + t0 * qk_ld + kh * DK, qk_ld, nrows, DK);
      load_tile<bf16, C::kVecK, C::kKp, kLdH>(st.K, k + t0 * qk_ld + kh * DK, qk_ld, nrows, DK);
      load_tile<float, 4, kChunk, kLdC>(st.P, ws.P + (hrow + c0) * kChunk, kChunk, nrows, kChunk);
      load_tile<float, 4, C::kVb, kLdS>(st.U, ws.U + (hrow + c0) * DV + v0, DV, nrows, vcols);
      if (threadIdx.x < kChunk) {
        if (int(threadIdx.x) < nrows)
          cp_async<4>(st.gam + threadIdx.x, ws.gam + hrow + c0 + threadIdx.x);
        else
          st.gam[threadIdx.x] = 0.f;
      }
      cp_async_commit();
    };

    __syncthreads();  // the previous item is done with shared memory

    // State slice in registers: warp owns m16 tiles warp, warp + 8, ... and every n8 tile.
    float sacc[kSm][kTilesN][4];
#pragma unroll
    for (int sm = 0; sm < kSm; ++sm) {
      const int mt = warp + kWarps * sm;
#pragma unroll
      for (int nt = 0; nt < kTilesN; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = 16 * mt + g8 + 8 * (e >> 1), col = 8 * nt + 2 * t4 + (e & 1);
          float val = 0.f;
          if (mt < kTilesS && slot_in >= 0 && row < DK && col < vcols)
            val = state[slot_in * state_ld + state_head + int64_t(row) * DV + col];
          sacc[sm][nt][e] = val;
          if (mt < kTilesS) Ss[row * kLdS + col] = val;
        }
      }
    }
    if (n_chunks > 0) issue(0, stage(0));

    for (int ci = 0; ci < n_chunks; ++ci) {
      const Stage st = stage(ci & 1);
      const int nrows = min(kChunk, len - ci * kChunk);
      const int64_t t0 = off + int64_t(ci) * kChunk;
      cp_async_wait_all();
      __syncthreads();  // stage ci and S visible; chunk ci - 1 done with the other stage
      if (ci + 1 < n_chunks) issue(ci + 1, stage((ci + 1) & 1));

      // Phase A: v_new = U - W S; o = scale exp(gamma) (q S). Warp: rows 16 mt..,
      // n8 tiles nh, nh + 2, ...
      const int mt = warp & 3, nh = warp >> 2;
      float acc_v[kSa][4] = {}, acc_o[kSa][4] = {};
#pragma unroll
      for (int kk = 0; kk < C::kKp / 8; ++kk) {
        uint32_t aw[4], aq[4];
        frag_a(aw, st.W + 16 * mt * kLdW + 8 * kk, kLdW, g8, t4);
        frag_a(aq, st.Q + 16 * mt * kLdH + 8 * kk, kLdH, g8, t4);
#pragma unroll
        for (int s = 0; s < kSa; ++s) {
          const int nt = nh + 2 * s;
          if (nt < kTilesN) {
            uint32_t b[2];
            frag_b(b, Ss + 8 * kk * kLdS + 8 * nt, kLdS, g8, t4);
            mma(acc_v[s], aw, b);
            mma(acc_o[s], aq, b);
          }
        }
      }
      const float gam_last = st.gam[nrows - 1];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 16 * mt + g8 + 8 * h;
        const float e = scale * __expf(st.gam[i]);
#pragma unroll
        for (int s = 0; s < kSa; ++s) {
          const int nt = nh + 2 * s;
          if (nt < kTilesN) {
            const int j = 8 * nt + 2 * t4;
            const float2 u = *reinterpret_cast<const float2*>(st.U + i * kLdS + j);
            *reinterpret_cast<float2*>(Vn + i * kLdS + j) =
                make_float2(u.x - acc_v[s][2 * h], u.y - acc_v[s][2 * h + 1]);
            acc_o[s][2 * h] *= e;
            acc_o[s][2 * h + 1] *= e;
          }
        }
        if (nh == 0 && t4 == 0) fs[i] = i < nrows ? __expf(gam_last - st.gam[i]) : 0.f;
      }
      __syncthreads();  // v_new and f complete

      // Phase B: o += P v_new, then out (bf16, once).
#pragma unroll
      for (int kk = 0; kk < kChunk / 8; ++kk) {
        uint32_t ap[4];
        frag_a(ap, st.P + 16 * mt * kLdC + 8 * kk, kLdC, g8, t4);
#pragma unroll
        for (int s = 0; s < kSa; ++s) {
          const int nt = nh + 2 * s;
          if (nt < kTilesN) {
            uint32_t b[2];
            frag_b(b, Vn + 8 * kk * kLdS + 8 * nt, kLdS, g8, t4);
            mma(acc_o[s], ap, b);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 16 * mt + g8 + 8 * h;
        if (i >= nrows) continue;
#pragma unroll
        for (int s = 0; s < kSa; ++s) {
          const int j = 8 * (nh + 2 * s) + 2 * t4;
          if (j < vcols)  // vcols is even, so j + 1 < vcols too
            *reinterpret_cast<__nv_bfloat162*>(out + (t0 + i) * out_ld + head * DV + v0 + j) =
                __floats2bfloat162_rn(acc_o[s][2 * h], acc_o[s][2 * h + 1]);
        }
      }

      // Phase C: S = exp(gamma_last) S + K^T (f v_new), into registers and Ss (phase A of this
      // chunk, the only reader of Ss, finished before the barrier above).
      const float decay = __expf(gam_last);
#pragma unroll
      for (int sm = 0; sm < kSm; ++sm)
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[sm][nt][e] *= decay;
#pragma unroll
      for (int kk = 0; kk < kChunk / 8; ++kk) {
        const float f0 = fs[8 * kk + t4], f1 = fs[8 * kk + t4 + 4];
        uint32_t b[kTilesN][2];
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt)
          frag_b(b[nt], Vn + 8 * kk * kLdS + 8 * nt, kLdS, g8, t4, f0, f1);
#pragma unroll
        for (int sm = 0; sm < kSm; ++sm) {
          const int smt = warp + kWarps * sm;
          if (smt < kTilesS) {
            uint32_t a[4];
            frag_a_t(a, st.K + 8 * kk * kLdH + 16 * smt, kLdH, g8, t4);
#pragma unroll
            for (int nt = 0; nt < kTilesN; ++nt) mma(sacc[sm][nt], a, b[nt]);
          }
        }
      }
#pragma unroll
      for (int sm = 0; sm < kSm; ++sm) {
        const int smt = warp + kWarps * sm;
        if (smt >= kTilesS) continue;
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = 16 * smt + g8 + 8 * h, col = 8 * nt + 2 * t4;
            *reinterpret_cast<float2*>(Ss + row * kLdS + col) =
                make_float2(sacc[sm][nt][2 * h], sacc[sm][nt][2 * h + 1]);
          }
      }
    }

    // Final state: each thread writes exactly the elements it read, so slot_out may be slot_in.
    if (slot_out >= 0) {
#pragma unroll
      for (int sm = 0; sm < kSm; ++sm) {
        const int mt = warp + kWarps * sm;
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = 16 * mt + g8 + 8 * (e >> 1), col = 8 * nt + 2 * t4 + (e & 1);
            if (mt < kTilesS && row < DK && col < vcols)
              state[slot_out * state_ld + state_head + int64_t(row) * DV + col] = sacc[sm][nt][e];
          }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Launch

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <int DK, int DV>
cudaError_t launch_gdn(const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, float* state, bf16* out, void* workspace, int heads_k,
                       int heads_v, int level, const TreeMeta& meta, cudaStream_t stream) {
  using C = Cfg<DK, DV>;
  if (!aligned(q, C::kVecK * 2) || !aligned(k, C::kVecK * 2) || !aligned(v, C::kVecV * 2) ||
      !aligned(out, 4) || !aligned(workspace, 16))
    return cudaErrorMisalignedAddress;
  const int64_t T = meta.n_tokens;
  const WorkspaceLayout l = workspace_layout(T, heads_v, DK, DV);
  unsigned char* base = static_cast<unsigned char*>(workspace);
  const Workspace ws{reinterpret_cast<float*>(base + l.W), reinterpret_cast<float*>(base + l.U),
                     reinterpret_cast<float*>(base + l.P), reinterpret_cast<float*>(base + l.gam),
                     reinterpret_cast<int2*>(base + l.chunks)};
  const float scale = float(1.0 / std::sqrt(double(DK)));

  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(gdn_prepare_kernel<DK, DV>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, C::kPrepBytes);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(gdn_main_kernel<DK, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               C::kMainBytes);
  if (err != cudaSuccess) return err;

  gdn_plan_kernel<<<1, kPlanThreads, 0, stream>>>(ws.chunks, level, meta);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  // Chunks of any level <= T / 64 + its nodes; about 4 waves of 2 resident blocks per SM.
  const int64_t max_chunks = (T + kChunk - 1) / kChunk + meta.max_level_nodes;
  const int prep_blocks =
      int(std::max<int64_t>(1, std::min<int64_t>(max_chunks * heads_v, int64_t(sms) * 8)));
  gdn_prepare_kernel<DK, DV><<<prep_blocks, kThreads, C::kPrepBytes, stream>>>(
      q, k, v, g, beta, ws, heads_k, heads_v, scale, meta);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;

  const int64_t main_items = int64_t(meta.max_level_nodes) * heads_v * C::kSplits;
  const int main_blocks =
      int(std::max<int64_t>(1, std::min<int64_t>(main_items, int64_t(sms) * 2)));
  gdn_main_kernel<DK, DV><<<main_blocks, kThreads, C::kMainBytes, stream>>>(
      q, k, state, out, ws, heads_k, heads_v, level, scale, meta);
  return cudaGetLastError();
}

using GdnLauncher = cudaError_t (*)(const bf16*, const bf16*, const bf16*, const float*,
                                    const float*, float*, bf16*, void*, int, int, int,
                                    const TreeMeta&, cudaStream_t);

template <int DK>
GdnLauncher pick_dv(int dim_v) {
  switch (dim_v) {
    case 8:
      return launch_gdn<DK, 8>;
    case 12:
      return launch_gdn<DK, 12>;
    case 16:
      return launch_gdn<DK, 16>;
    case 24:
      return launch_gdn<DK, 24>;
    default:
      return nullptr;
  }
}

GdnLauncher pick(int dim_k, int dim_v) {
  switch (dim_k) {
    case 8:
      return pick_dv<8>(dim_v);
    case 12:
      return pick_dv<12>(dim_v);
    case 16:
      return pick_dv<16>(dim_v);
    case 24:
      return pick_dv<24>(dim_v);
    case 128:
      return dim_v == 128 ? launch_gdn<128, 128> : nullptr;
    default:
      return nullptr;
  }
}

}  // namespace

size_t gdn_workspace_bytes(int64_t T, int heads_v, int dim_k, int dim_v) {
  return workspace_layout(std::max<int64_t>(T, 0), std::max(heads_v, 0), std::max(dim_k, 0),
                          std::max(dim_v, 0))
      .total;
}

cudaError_t gdn_chunked(const bf16* q, const bf16* k, const bf16* v, const float* g,
                        const float* beta, float* state, bf16* out, void* workspace, int heads_k,
                        int heads_v, int dim_k, int dim_v, int level, const TreeMeta& meta,
                        cudaStream_t stream) {
  if (heads_k <= 0 || heads_v <= 0 || heads_v % heads_k != 0 || level < 0)
    return cudaErrorInvalidValue;
  const GdnLauncher launch = pick(dim_k, dim_v);
  if (launch == nullptr) return cudaErrorInvalidValue;
  if (meta.n_tokens == 0 || meta.max_level_nodes == 0) return cudaSuccess;
  if (workspace == nullptr) return cudaErrorInvalidValue;
  return launch(q, k, v, g, beta, state, out, workspace, heads_k, heads_v, level, meta, stream);
}

}  // namespace flide::kernels
