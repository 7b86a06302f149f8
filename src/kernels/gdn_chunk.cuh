// Shared by the chunked delta rule's kernels (gdn_prepare.cu, gdn_state.cu) and
// their launcher (gdn_chunk.cu): tensor-core fragment helpers, asynchronous tile copies, the
// head-dim shapes and the workspace the kernels hand results through.
//
// Tensor cores, all with fp32 accumulation: in the prepare kernel mma.sync, m16n8k8 tf32 for its
// products of two fp32 operands and m16n8k16 bf16 for the others (mma_bf16.cuh); in the state
// kernel wgmma (wgmma.cuh). tf32 fragment layout (PTX
// ISA), lane = 4 g + t: A (16x8) a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); B (8x8, k x n)
// b0 (t, g), b1 (t+4, g); C (16x8) c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
// Shared-memory leading dimensions are padded so that every fragment load is free of bank conflicts
// for Dk = Dv = 128. Small head dims (test checkpoints) pad to whole tiles with zeros.
//
// T and P, which the prepare kernel hands to the state kernel and only tensor cores read, are
// stored in bf16, the operand type of the products that take them (fla's kernels keep the same
// factors in the inputs' dtype): half the bytes of fp32, for a kernel bound by reading them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cp_async.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma_bf16.cuh"
#include "kernels/tree_meta.h"

namespace flide::kernels::gdn_detail {

using bf16 = __nv_bfloat16;

using detail::acc_pair_as_a;
using detail::cp_async;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::ldsm_x2;
using detail::ldsm_x4;
using detail::mma_bf16;
using detail::pack_bf16;
using detail::smem_u32;

constexpr int kChunk = 64;  // HF chunk_size
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

// Named barriers among some warps (0 is __syncthreads). bar.arrive does not wait, and what the
// arriving thread wrote before it is visible to the threads that complete the barrier with
// bar.sync (PTX ISA: the producer/consumer pattern).
__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Rounding and tensor-core fragments

__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float round_tf32(float x) {
  return __uint_as_float(to_tf32(x));
}

// d += a b
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The A fragment of an accumulator tile (16x8), its 8 columns as k under the permuted order
// (slot t <-> column 2t, slot t + 4 <-> 2t + 1): a = (c0, c2, c1, c3), rounded to tf32 unless it
// already is. The B fragments it meets must read their k rows in the same order.
__device__ __forceinline__ void acc_as_a(uint32_t (&a)[4], const float (&c)[4]) {
  a[0] = to_tf32(c[0]), a[1] = to_tf32(c[2]), a[2] = to_tf32(c[1]), a[3] = to_tf32(c[3]);
}

// ---------------------------------------------------------------------------------------------
// Asynchronous tile copies

template <int kBytes>
__device__ __forceinline__ void zero_bytes(void* p) {
  if constexpr (kBytes == 16)
    *static_cast<uint4*>(p) = make_uint4(0u, 0u, 0u, 0u);
  else if constexpr (kBytes == 8)
    *static_cast<uint2*>(p) = make_uint2(0u, 0u);
  else
    *static_cast<uint32_t*>(p) = 0u;
}

// One kVec-element vector of a staged tile: copied asynchronously when it is in range, else zeros.
template <typename T, int kVec>
__device__ __forceinline__ void stage_vector(T* dst, const T* src, bool in_range) {
  constexpr int kBytes = kVec * int(sizeof(T));
  if (in_range)
    cp_async<kBytes>(dst, src);
  else
    zero_bytes<kBytes>(dst);
}

// dst [kChunk][kLd] <- src rows r < nrows (row stride src_ld), vectors of kVec elements
// [0, vecs) of each row, element columns c < cols, asynchronously; every other element of those
// vectors is set to zero. Copied by threads tid of nthreads (the whole block unless a kernel keeps
// some warps off loads), a multiple of 32, with vecs a power of two <= 32: so a thread's vectors
// all sit in one column and only the row advances, and a copy costs a few instructions instead of
// a division and a 64-bit product each.
template <typename T, int kVec, int kLd>
__device__ __forceinline__ void load_rows(T* dst, const T* src, int64_t src_ld, int nrows, int cols,
                                          int vecs, int tid, int nthreads) {
  const int c = (tid & (vecs - 1)) * kVec, dr = nthreads / vecs;
  const bool col_in = c < cols;
  const int64_t step = int64_t(dr) * src_ld;
  src += int64_t(tid / vecs) * src_ld + c;
  for (int r = tid / vecs; r < kChunk; r += dr, src += step)
    stage_vector<T, kVec>(dst + r * kLd + c, src, col_in && r < nrows);
}

// load_rows over the first kCols columns. cols % kVec == 0.
template <typename T, int kVec, int kCols, int kLd>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t src_ld, int nrows, int cols,
                                          int tid = threadIdx.x, int nthreads = kThreads) {
  constexpr int kVecs = kCols / kVec;
  static_assert(kCols % kVec == 0 && kVecs <= 32 && (kVecs & (kVecs - 1)) == 0,
                "a power of two of whole vectors, at most 32");
  load_rows<T, kVec, kLd>(dst, src, src_ld, nrows, cols, kVecs, tid, nthreads);
}

// ---------------------------------------------------------------------------------------------
// Shapes, workspace, launch arguments

template <int DK, int DV>
struct Dims {
  static_assert(DK % 4 == 0 && DV % 4 == 0, "head dims are multiples of 4");
  static constexpr int kKp = (DK + 15) / 16 * 16;    // key dim padded to whole m16 tiles
  static constexpr int kVecK = DK % 8 == 0 ? 8 : 4;  // bf16 elements per async copy
  static constexpr int kVecV = DV % 8 == 0 ? 8 : 4;
  // Leading dimensions (elements). fp32 A tiles: ld = 4 mod 32 words; bf16 tiles: ld / 2 = 4
  // mod 32 words.
  static constexpr int kLdH = kKp + 8;     // bf16 q, k rows
  static constexpr int kLdC = kChunk + 4;  // fp32 rows of 64: L, T (prepare)
};

// Device scratch, carved identically by gdn_workspace_bytes and the launcher. Rows are indexed
// by value head and stream row, so chunks of different nodes never share one.
struct Workspace {
  bf16* T;       // [Hv][T][64] row i of a chunk's (I + A)^-1 (0 for j > i)
  bf16* P;       // [Hv][T][64] row i of a chunk against its rows j (0 for j > i)
  float* gam;    // [Hv][T] in-chunk cumulative g
  int2* chunks;  // [0].x: number of chunks of the level; [1 + c]: (node, first row in node)
};

struct GdnArgs {
  const bf16* q;  // [T, Hk*Dk]
  const bf16* k;  // [T, Hk*Dk]
  const bf16* v;  // [T, Hv*Dv]
  const float* g;
  const float* beta;
  float* state;  // [slots, Hv*Dk*Dv]
  bf16* out;     // [T, Hv*Dv]
  Workspace ws;
  int heads_k, heads_v, level;
  float scale;  // Dk^-1/2
  int sms;      // the device's SM count (grid sizing)
  TreeMeta meta;
  cudaStream_t stream;
};

// Upper bound of a level's chunks: T / 64 + one short chunk per node.
inline int64_t max_level_chunks(const TreeMeta& meta) {
  return (int64_t(meta.n_tokens) + kChunk - 1) / kChunk + meta.max_level_nodes;
}

// Blocks of a grid-stride launch over `items`: at most `per_sm` per SM, at least one.
inline int stride_grid(int64_t items, int sms, int per_sm) {
  const int64_t cap = int64_t(sms) * per_sm;
  return int(items < 1 ? 1 : items < cap ? items : cap);
}

// kKernel<<<blocks, kThreads, kBytes, stream>>>(args...), its dynamic shared-memory limit raised
// to kBytes first (the prepare and state kernels both need more than the default 48 KB).
template <auto kKernel, int kBytes, typename... Args>
cudaError_t launch_with_smem(int blocks, cudaStream_t stream, Args... args) {
  const cudaError_t err = detail::raise_smem_limit<kKernel, kBytes>();
  if (err != cudaSuccess) return err;
  kKernel<<<blocks, kThreads, kBytes, stream>>>(args...);
  return cudaGetLastError();
}

// One per kernel file; each instantiates them for every shape of FLIDE_GDN_SHAPES.
cudaError_t launch_plan(const GdnArgs& a);
template <int DK, int DV>
cudaError_t launch_prepare(const GdnArgs& a);
template <int DK, int DV>
cudaError_t launch_state(const GdnArgs& a);

// The head dims the kernels are built for: the real models' 128 x 128 and small test shapes.
#define FLIDE_GDN_SMALL_DV(X, DK) X(DK, 8) X(DK, 12) X(DK, 16) X(DK, 24)
#define FLIDE_GDN_SHAPES(X) \
  FLIDE_GDN_SMALL_DV(X, 8)  \
  FLIDE_GDN_SMALL_DV(X, 12) FLIDE_GDN_SMALL_DV(X, 16) FLIDE_GDN_SMALL_DV(X, 24) X(128, 128)

}  // namespace flide::kernels::gdn_detail
