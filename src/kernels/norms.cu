// Row norms: rmsnorm (HF Qwen3_5RMSNorm, optional 1 + w) and gated_rmsnorm (HF
// Qwen3_5RMSNormGated). One kernel template serves both: a group of threads owns a row, sums its
// squares in fp32, and rescales the row it kept in registers; only the per-op first read and
// epilogue differ. (The GDN layer's q/k L2 norm is the epilogue of its conv, gdn_conv.cu; the
// residual adds are in the epilogues of the products that feed them, CudaOps::matmul_add.)
//
// Determinism: the group size depends on dim alone and chunk c of a row always goes to thread
// c % group, summed in ascending order, then a fixed butterfly / per-warp order. A row's result
// therefore depends only on the row, never on the batch it arrived in or on the pointers'
// alignment (bf16x8.cuh).
//
// Operands other than the row itself that only the epilogue needs (gated_rmsnorm's z) are read
// with the row, before the reduction: read after it, they would make every row wait on memory
// twice.
//
// Numerics: fp32 throughout, one rounding to bf16 at the store. gated_rmsnorm keeps the
// normalised value in fp32 before multiplying by w, where HF rounds it to bf16 first (spec
// §4 step 8); the difference is below one bf16 ulp of the output. rsqrtf is the hardware
// approximation (~2 ulp fp32), as torch.rsqrt is on the GPU.
#include <algorithm>

#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"
#include "kernels/fp8_rows.cuh"
#include "kernels/launch.cuh"

namespace flide::kernels {
namespace {

using detail::load_raw8;
using detail::Raw;
using detail::raw_at;
using detail::store8;

// 512 rather than 1024 threads per block leaves 128 registers a thread, room for the cached
// chunks plus the gated epilogue's operands without spilling; V = 2 still covers H = 5120.
constexpr int kMaxGroup = 512;
// Blocks of the launches that pack several rows into a block (group <= 32), and how many of them
// an SM gets, each walking its rows in turn with its weights read once (up to 128 registers a
// thread: two always fit). The 0.8B model's norm of a round of 4 (25,040 rows of 1,024) takes
// 29.1 us so, against 27.3 for a plain copy of the same bytes and 36.4 as a grid of one row a
// warp whose chunk loads waited on each other (bench/results/2026-12-01-norm-loads-ahead.md).
constexpr int kPackedThreads = 256;
constexpr int kPackedBlocksPerSm = 2;

struct NoSide {};

struct RmsNormOp {
  using Side = NoSide;
  const bf16* x;  // [rows, dim]
  const bf16* w;  // [dim]
  bf16* out;      // [rows, dim], may be x
  float eps;
  bool unit_offset;

  __device__ const bf16* in_row(int64_t r, int64_t dim) const { return x + r * dim; }
  __device__ Raw<8> load(int64_t r, int64_t dim, int64_t e, int64_t valid, bool vec) const {
    return load_raw8(in_row(r, dim) + e, valid, vec);
  }
  __device__ void load_side(int64_t, int64_t, int64_t, int64_t, bool, Side&) const {}
  __device__ float scale(float sum_sq, int64_t dim) const {
    return detail::rms_scale(sum_sq, dim, eps);
  }
  __device__ Raw<8> load_w(int64_t e, int64_t valid, bool vec) const {
    return load_raw8(w + e, valid, vec);
  }
  __device__ void finish(int64_t r, int64_t dim, int64_t e, int64_t valid, bool vec,
                         const Raw<8>& v, const Side&, const Raw<8>& wc, float s) const {
    float y[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float wk = raw_at(wc, k);
      y[k] = raw_at(v, k) * s * (unit_offset ? 1.f + wk : wk);
    }
    store8(out + r * dim + e, valid, vec, y);
  }
};

struct GatedRmsNormOp {
  struct Side {
    Raw<8> z;
  };
  const bf16* o;  // [rows, dim]
  const bf16* z;  // [rows, dim]
  const bf16* w;  // [dim]
  bf16* out;      // [rows, dim]
  float eps;

  __device__ const bf16* in_row(int64_t r, int64_t dim) const { return o + r * dim; }
  __device__ Raw<8> load(int64_t r, int64_t dim, int64_t e, int64_t valid, bool vec) const {
    return load_raw8(in_row(r, dim) + e, valid, vec);
  }
  __device__ void load_side(int64_t r, int64_t dim, int64_t e, int64_t valid, bool vec,
                            Side& side) const {
    side.z = load_raw8(z + r * dim + e, valid, vec);
  }
  __device__ float scale(float sum_sq, int64_t dim) const {
    return detail::rms_scale(sum_sq, dim, eps);
  }
  __device__ Raw<8> load_w(int64_t e, int64_t valid, bool vec) const {
    return load_raw8(w + e, valid, vec);
  }
  __device__ void finish(int64_t r, int64_t dim, int64_t e, int64_t valid, bool vec,
                         const Raw<8>& v, const Side& side, const Raw<8>& wc, float s) const {
    float y[8];
#pragma unroll
    for (int k = 0; k < 8; ++k)
      y[k] = detail::gated_rms(raw_at(wc, k), raw_at(v, k), s, raw_at(side.z, k));
    store8(out + r * dim + e, valid, vec, y);
  }
};

// A row belongs to `group` consecutive threads: group <= 32 packs blockDim / group rows into a
// block; group == blockDim (a multiple of 32, at most kMaxGroup) gives each block one row. Each
// thread reads every chunk it owns once through op.load and keeps its first V chunks in
// registers; chunks beyond V * group (dim > 8192, only with kLong: a group of a whole block) are
// read again from memory (op.in_row) for the store, by the same thread, so out == x stays safe.
template <class Op, int V, bool kLong, bool kVec, int kGroup = 0>
__global__ void __launch_bounds__(kLong ? kMaxGroup : kPackedThreads,
                                  kLong ? 1 : kPackedBlocksPerSm)
    norm_rows_kernel(Op op, int64_t rows, int64_t dim, int group_arg) {
  // kGroup > 0: the group as a constant (a warp a row), its reduction without branches.
  const int group = kGroup > 0 ? kGroup : group_arg;
  __shared__ float warp_sums[32];
  const int lane = int(threadIdx.x) % group;
  const int rows_per_block = int(blockDim.x) / group;
  const int64_t n_chunks = (dim + 7) / 8;
  // Elements of the row from e on (only the first 8 matter): with kVec dim is a multiple of 8,
  // so a chunk is whole, and the scalar paths of the loads and stores drop out.
  auto valid = [&](int64_t e) { return kVec ? int64_t(8) : dim - e; };
  // A thread's chunks are the same columns in every row it visits: their weights are read once.
  Raw<8> wc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t c = lane + int64_t(v) * group;
    if (c < n_chunks) wc[v] = op.load_w(8 * c, valid(8 * c), kVec);
  }
  for (int64_t first = int64_t(blockIdx.x) * rows_per_block; first < rows;
       first += int64_t(gridDim.x) * rows_per_block) {
    // Threads past the last row still run the shuffles and barriers, with nothing to do.
    const int64_t r = first + int(threadIdx.x) / group;
    const bool live = r < rows;

    Raw<8> cache[V];  // the row's own bf16, widened where used: half the registers of fp32
    typename Op::Side side[V];
    float sum_sq = 0.f;
    // Every load before the first sum: a chunk's sum in the same branch as the next chunk's load
    // made each load wait for the one before it (34-36 us for the 0.8B norm of a round of 4).
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane + int64_t(v) * group;
      if (live && c < n_chunks) {
        cache[v] = op.load(r, dim, 8 * c, valid(8 * c), kVec);
        op.load_side(r, dim, 8 * c, valid(8 * c), kVec, side[v]);
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane + int64_t(v) * group;
      if (live && c < n_chunks) {
#pragma unroll
        for (int k = 0; k < 8; ++k) sum_sq = fmaf(raw_at(cache[v], k), raw_at(cache[v], k), sum_sq);
      }
    }
    for (int64_t c = lane + int64_t(V) * group; kLong && live && c < n_chunks; c += group) {
      const Raw<8> t = op.load(r, dim, 8 * c, valid(8 * c), kVec);
#pragma unroll
      for (int k = 0; k < 8; ++k) sum_sq = fmaf(raw_at(t, k), raw_at(t, k), sum_sq);
    }

    sum_sq = detail::group_sum_lanes(sum_sq, group < 32 ? group : 32);
    if (group > 32) {
      const int n_warps = int(blockDim.x) / 32;
      if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum_sq;
      __syncthreads();
      sum_sq = 0.f;
      for (int i = 0; i < n_warps; ++i) sum_sq += warp_sums[i];
      __syncthreads();  // warp_sums is rewritten for the next row
    }
    if (!live) continue;
    const float s = op.scale(sum_sq, dim);
    const bf16* in = op.in_row(r, dim);

#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane + int64_t(v) * group;
      if (c < n_chunks) op.finish(r, dim, 8 * c, valid(8 * c), kVec, cache[v], side[v], wc[v], s);
    }
    for (int64_t c = lane + int64_t(V) * group; kLong && c < n_chunks; c += group) {
      typename Op::Side sd;
      const int64_t e = 8 * c;
      const Raw<8> t = load_raw8(in + e, valid(e), kVec);
      op.load_side(r, dim, e, valid(e), kVec, sd);
      op.finish(r, dim, e, valid(e), kVec, t, sd, op.load_w(e, valid(e), kVec), s);
    }
  }
}

// Group size from dim only (determinism, see the file top): up to 32 chunks a power-of-two
// group with one chunk per thread (several rows per warp for head-sized rows), up to 128 chunks a
// warp with two or four, beyond that a block of up to kMaxGroup threads with two chunks per
// thread. A warp's row needs no block barrier, so up to 0.8B's hidden size of 1,024 a warp's rows
// follow each other without waiting on the block (as a block of 64 threads a row, the 1,024 norm
// moved 2.6 TB/s: bench/results/2026-12-01-norm-warp-rows.md).
template <class Op, bool kVec>
cudaError_t launch_norm(const Op& op, int64_t rows, int64_t dim, cudaStream_t stream) {
  const int64_t n_chunks = (dim + 7) / 8;
  int sms = 0;
  if (const cudaError_t err = detail::multiprocessors(sms); err != cudaSuccess) return err;
  // Packed blocks: kPackedBlocksPerSm an SM at most, each walking its rows in turn.
  const auto packed_blocks = [&](int group) {
    return std::min(detail::blocks_for(rows, kPackedThreads / group), sms * kPackedBlocksPerSm);
  };
  if (n_chunks <= 32) {
    int group = 1;
    while (group < n_chunks) group *= 2;
    norm_rows_kernel<Op, 1, false, kVec>
        <<<packed_blocks(group), kPackedThreads, 0, stream>>>(op, rows, dim, group);
  } else if (n_chunks <= 128) {
    constexpr int threads = kPackedThreads, group = 32;
    const int blocks = packed_blocks(group);
    if (n_chunks <= 64)
      norm_rows_kernel<Op, 2, false, kVec, group>
          <<<blocks, threads, 0, stream>>>(op, rows, dim, group);
    else
      norm_rows_kernel<Op, 4, false, kVec, group>
          <<<blocks, threads, 0, stream>>>(op, rows, dim, group);
  } else {
    const int64_t per_thread2 = (n_chunks + 1) / 2;
    const int group = int(std::min<int64_t>(kMaxGroup, (per_thread2 + 31) / 32 * 32));
    norm_rows_kernel<Op, 2, true, kVec>
        <<<detail::blocks_for(rows, 1), group, 0, stream>>>(op, rows, dim, group);
  }
  return cudaGetLastError();
}

// launch_norm with vec (16-byte accesses: dim a multiple of 8, every pointer aligned) as a
// constant of the kernel.
template <class Op>
cudaError_t launch_norm(const Op& op, int64_t rows, int64_t dim, bool vec, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  return vec ? launch_norm<Op, true>(op, rows, dim, stream)
             : launch_norm<Op, false>(op, rows, dim, stream);
}

// rmsnorm and quantize_rows_fp8 of its output in one pass, for rows of up to kFp8MaxChunks chunks
// (a warp a row, V chunks a lane, the packed launch of launch_norm): the same sums in the same
// order, so out gets rmsnorm's bits and q and scale quantize_rows_fp8's of out. The row's largest
// rounded value sets its scale once the whole row is in registers.
constexpr int kFp8MaxChunks = 128;

template <int V>
__global__ void __launch_bounds__(kPackedThreads, kPackedBlocksPerSm)
    rmsnorm_fp8_kernel(RmsNormOp op, int64_t rows, int64_t dim, uint8_t* q, float* scale) {
  constexpr int kGroup = 32;
  const int lane = int(threadIdx.x) % kGroup;
  const int rows_per_block = int(blockDim.x) / kGroup;
  const int64_t n_chunks = dim / 8;
  Raw<8> wc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const int64_t c = lane + int64_t(v) * kGroup;
    if (c < n_chunks) wc[v] = op.load_w(8 * c, 8, true);
  }
  for (int64_t first = int64_t(blockIdx.x) * rows_per_block; first < rows;
       first += int64_t(gridDim.x) * rows_per_block) {
    const int64_t r = first + int(threadIdx.x) / kGroup;  // a warp's rows: live or not as one
    if (r >= rows) continue;
    Raw<8> cache[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane + int64_t(v) * kGroup;
      if (c < n_chunks) cache[v] = op.load(r, dim, 8 * c, 8, true);
    }
    float sum_sq = 0.f;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane + int64_t(v) * kGroup;
      if (c < n_chunks) {
#pragma unroll
        for (int k = 0; k < 8; ++k) sum_sq = fmaf(raw_at(cache[v], k), raw_at(cache[v], k), sum_sq);
      }
    }
    sum_sq = detail::group_sum_lanes(sum_sq, kGroup);
    const float s = op.scale(sum_sq, dim);
    float y[V][8];
    float amax = 0.f;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane + int64_t(v) * kGroup;
      if (c >= n_chunks) continue;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float wk = raw_at(wc[v], k);
        y[v][k] = raw_at(cache[v], k) * s * (op.unit_offset ? 1.f + wk : wk);
      }
      store8(op.out + r * dim + 8 * c, 8, true, y[v]);
#pragma unroll
      for (int k = 0; k < 8; ++k) {  // from here on, the stored value
        y[v][k] = __bfloat162float(__float2bfloat16_rn(y[v][k]));
        amax = fmaxf(amax, fabsf(y[v][k]));
      }
    }
    const float row_scale = detail::fp8_row_scale(amax);
    if (lane == 0) scale[r] = row_scale;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t c = lane + int64_t(v) * kGroup;
      if (c < n_chunks) detail::store_e4m3x8(q + r * dim + 8 * c, y[v], 1.f / row_scale);
    }
  }
}

}  // namespace

bool rmsnorm_fp8_supported(const void* x, const void* w, const void* out, int64_t dim) {
  return dim > 0 && dim % 16 == 0 && dim / 8 > 32 && dim / 8 <= kFp8MaxChunks &&
         detail::aligned16(x) && detail::aligned16(w) && detail::aligned16(out);
}

cudaError_t rmsnorm_fp8(const bf16* x, const bf16* w, bf16* out, uint8_t* q, float* scale,
                        int64_t rows, int64_t dim, float eps, bool unit_offset,
                        cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (!rmsnorm_fp8_supported(x, w, out, dim) || !detail::aligned16(q) || !scale)
    return cudaErrorInvalidValue;
  int sms = 0;
  if (const cudaError_t err = detail::multiprocessors(sms); err != cudaSuccess) return err;
  const int blocks =
      std::min(detail::blocks_for(rows, kPackedThreads / 32), sms * kPackedBlocksPerSm);
  const RmsNormOp op{x, w, out, eps, unit_offset};
  // launch_norm's choice of V for a warp a row: rmsnorm's sums, term for term.
  if (dim / 8 <= 64)
    rmsnorm_fp8_kernel<2><<<blocks, kPackedThreads, 0, stream>>>(op, rows, dim, q, scale);
  else
    rmsnorm_fp8_kernel<4><<<blocks, kPackedThreads, 0, stream>>>(op, rows, dim, q, scale);
  return cudaGetLastError();
}

cudaError_t rmsnorm(const bf16* x, const bf16* w, bf16* out, int64_t rows, int64_t dim, float eps,
                    bool unit_offset, cudaStream_t stream) {
  const bool vec =
      dim % 8 == 0 && detail::aligned16(x) && detail::aligned16(w) && detail::aligned16(out);
  return launch_norm(RmsNormOp{x, w, out, eps, unit_offset}, rows, dim, vec, stream);
}

cudaError_t gated_rmsnorm(const bf16* o, const bf16* z, const bf16* w, bf16* out, int64_t rows,
                          int64_t dim, float eps, cudaStream_t stream) {
  const bool vec = dim % 8 == 0 && detail::aligned16(o) && detail::aligned16(z) &&
                   detail::aligned16(w) && detail::aligned16(out);
  return launch_norm(GatedRmsNormOp{o, z, w, out, eps}, rows, dim, vec, stream);
}

}  // namespace flide::kernels
