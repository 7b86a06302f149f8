// The Gated DeltaNet layer's causal depthwise conv + SiLU over one tree level (spec qwen3_5.md
// §4 steps 2, 3, 6), the CUDA twin of CpuOps::gdn_conv: the packed projection x [T, 2 Kd + Vd]
// goes in, q, k [T, Kd] and v [T, Vd] come out, every Dk-wide head of q and k L2-normalised.
// Memory-bound: every input row is read once and every output row written once, so the level's
// rows are cut into flat tiles of kRows stream rows and a thread owns kVec (8: one 16-byte
// access) adjacent channels of one tile, sliding the K-1 previous inputs through registers.
// Its inputs come through a private ring in shared memory, copied asynchronously one run of kRun
// rows ahead: loads issued from registers leave the thread waiting on each batch, and this
// kernel's arithmetic (the SiLU, the norm's shuffles) is as long as its memory time, so the two
// must overlap.
//
// Channels are handed to threads in units of kVec: q and k heads first, each head to an aligned
// group of `group` lanes (dim_k / kVec rounded up to a power of two, at most a warp; lanes past
// the head's end idle), then v, kVec channels per lane. For Dk = 128 (every Qwen3.5 size) and
// kVec = 8 a head is exactly half a warp and no lane idles. The L2 norm is the epilogue of each
// row: the SiLU output is rounded to bf16 (the value an unfused conv would have stored), its
// squares are summed in fp32 over the group by butterfly shuffles (every lane gets the bitwise-same
// sum), and the row is scaled by rsqrt(sum + eps) and rounded to bf16 once more. The lanes of a
// warp walk the same rows (the walk depends only on the tile), so the shuffles are uniform. A
// head's result depends only on its row and on kVec (the widest the shapes and pointers allow),
// never on the batch.
//
// A tile may hold the tail of one node and the head of the next; a thread walks its rows node
// by node (token_node). The rows a node reads from its incoming window (its first K-1) are all
// handled by the thread whose tile holds the node's first row, even when they spill into the
// next tile, and that same thread writes the node's outgoing window (raw pre-conv inputs) after
// having read the incoming one: so for each channel exactly one thread touches a node's window
// slots, and a node may read and write the same slot. The grid is capped and walks its items in
// a stride loop, so a launch costs the same whatever the level's share of the stream.
#include <algorithm>
#include <cstdint>

#include "kernels/bf16x8.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/gdn.h"
#include "kernels/gdn_conv_row.cuh"
#include "kernels/launch.cuh"

namespace flide::kernels {

using bf16 = __nv_bfloat16;

namespace {

using detail::load_raw;
using detail::Raw;
using detail::raw_at;
using detail::store_raw;
using detail::zero_raw;

constexpr int kThreads = 128;
constexpr int kRows = 32;  // stream rows per tile
constexpr int kRun = 4;    // rows a thread computes between two waits for its copies
constexpr int kMaxKernel = 8;
constexpr int kBlocksPerSm = 16;  // grid cap (a few waves of 128-thread blocks per SM)

template <typename T>
__device__ __forceinline__ T lesser(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
__device__ __forceinline__ T greater(T a, T b) {
  return a < b ? b : a;
}

// Row input src into a thread's ring slot: asynchronously, except for single channels (cp.async
// copies at least 4 bytes).
template <int kVec>
__device__ __forceinline__ void copy_row(Raw<kVec>* slot, const bf16* src) {
  if constexpr (kVec >= 2)
    detail::cp_async<kVec* int(sizeof(bf16))>(slot, src);
  else
    *slot = load_raw<kVec>(src);
}

template <int kVec>
__device__ __forceinline__ void store_vec(bf16* p, const float (&f)[kVec]) {
  if constexpr (kVec == 8) {
    detail::store8(p, 8, true, f);
  } else if constexpr (kVec == 4) {
    *reinterpret_cast<uint2*>(p) =
        make_uint2(detail::pack_bf16(f[0], f[1]), detail::pack_bf16(f[2], f[3]));
  } else if constexpr (kVec == 2) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(f[0], f[1]);
  } else {
    *p = __float2bfloat16_rn(f[0]);
  }
}

// Where the channels go (see the file top). Units [0, qk_units) are q and k head lanes,
// [qk_units, units) v lanes. Row and channel indices fit in 32 bits (the launcher checks);
// addresses are formed in 64.
struct Split {
  int C;         // channels of x and of a window row: 2 Kd + Vd
  int Kd;        // q and k width: heads_k * dim_k
  int Vd;        // v width
  int dim_k;     // key head width (a multiple of kVec)
  int group;     // lanes per key head: a power of two >= dim_k / kVec, <= 32
  int qk_units;  // 2 * heads_k * group
  int units;     // qk_units + Vd / kVec
};

// grid: min(tiles * unit blocks, cap), stride loop over (tile, unit block) items.
// Up to 128 registers; 512 threads per SM with a run of kRun 16-byte copies each keep 32 KB in
// flight per SM, in shared memory rather than registers.
template <int K, int kVec>
__global__ void __launch_bounds__(kThreads, 4)
    gdn_conv_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* window,
                    bf16* __restrict__ q, bf16* __restrict__ k, bf16* __restrict__ v, Split sp,
                    float eps, int level, TreeMeta meta) {
  constexpr int kHist = K > 1 ? K - 1 : 1;  // register arrays cannot be empty
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  if (nb >= ne) return;
  // Levels occupy contiguous stream rows (backend/stream.h: ordered by level, no gaps).
  const int r_first = meta.node_offset[nb];
  const int r_last = meta.node_offset[ne - 1] + meta.node_length[ne - 1];
  const int tiles = (r_last - r_first + kRows - 1) / kRows;
  const int ublocks = (sp.units + kThreads - 1) / kThreads;
  const int64_t C = sp.C, win_ld = int64_t(K - 1) * sp.C;
  const int lane = int(threadIdx.x) % 32;
  // Slot [h][d][t] is thread t's alone (no barriers); a warp's 16-byte reads of one slot are
  // contiguous.
  __shared__ __align__(16) Raw<kVec> ring[2][kRun][kThreads];

  for (int item = blockIdx.x; item < tiles * ublocks; item += gridDim.x) {
    const int i = (item % ublocks) * kThreads + int(threadIdx.x);  // this thread's unit
    // Whole warps drop out (no block-wide synchronisation in this kernel); a warp with any q/k
    // lane runs the norm's shuffles on all 32 lanes.
    if (i - lane >= sp.units) continue;
    const bool norm_warp = i - lane < sp.qk_units;
    const bool qk = i < sp.qk_units;
    bool live = i < sp.units;  // owns channels [c, c + kVec)
    int c = 0, ld = 0;         // first channel in x; row stride of the output
    bf16* out = nullptr;       // channel c's column of row 0 in q, k or v
    if (qk) {
      const int d = (i % sp.group) * kVec;
      live = d < sp.dim_k;
      c = live ? i / sp.group * sp.dim_k + d : 0;  // q heads, then k heads
      out = c < sp.Kd ? q + c : k + (c - sp.Kd);
      ld = sp.Kd;
    } else if (live) {
      c = 2 * sp.Kd + (i - sp.qk_units) * kVec;
      out = v + (c - 2 * sp.Kd);
      ld = sp.Vd;
    }
    const int r_begin = r_first + item / ublocks * kRows;
    const int r_end = lesser(r_begin + kRows, r_last);

    detail::FloatTaps<K, kVec> wt;  // w[c + v][j]; j = K - 1 multiplies the current row
#pragma unroll
    for (int v = 0; v < kVec; ++v)
#pragma unroll
      for (int j = 0; j < K; ++j) wt.w[j][v] = live ? __bfloat162float(w[(c + v) * K + j]) : 0.f;

    for (int r = r_begin; r < r_end;) {
      const int n = meta.token_node[r];
      if (n < nb || n >= ne) {  // not expected: the level's rows are contiguous
        ++r;
        continue;
      }
      const int off = meta.node_offset[n];
      const int len = meta.node_length[n];
      const int u_first = r - off;                      // node row of r
      const int u_tile_end = lesser(len, r_end - off);  // node rows in tile
      // Rows [0, prefix) read the incoming window: the tile holding row 0 does all of them.
      const int prefix = lesser(len, K - 1);
      const int ub = u_first == 0 ? 0 : greater(u_first, prefix);
      const int ue = u_first == 0 ? greater(u_tile_end, prefix) : u_tile_end;
      r = off + u_tile_end;
      if (ub >= ue) continue;  // (only for u_first > 0: the tile-0 thread wrote the window)

      // hist[j]: input of node row ub - (K-1) + j, widened; before row 0 from slot_in (or 0).
      const int slot_in = meta.node_slot_in[n];
      float hist[kHist][kVec];
#pragma unroll
      for (int j = 0; j < K - 1; ++j) {
        const int u = ub - (K - 1) + j;
        const Raw<kVec> in = !live    ? zero_raw<kVec>()
                             : u >= 0 ? load_raw<kVec>(x + (off + u) * C + c)
                             : slot_in >= 0
                                 ? load_raw<kVec>(window + slot_in * win_ld + (K - 1 + u) * C + c)
                                 : zero_raw<kVec>();
#pragma unroll
        for (int v = 0; v < kVec; ++v) hist[j][v] = raw_at(in, v);
      }
      // One row: the conv over the history and xr, SiLU, the q/k head's norm; xr becomes history.
      auto row = [&](const Raw<kVec>& xr, bf16* dst) {
        float y[kVec];
        const float sum_sq = detail::conv_silu_row<K, kVec>(wt, hist, xr, y);
        if (norm_warp) detail::qk_norm<kVec>(y, sum_sq, sp.group, qk, eps);
        if (live) store_vec<kVec>(dst, y);
      };
      // Runs of kRun rows alternate between the ring's halves: a run's copies are issued (one
      // commit group) before the previous run is waited for and computed. Between two waits the
      // run's rows have no barrier, so their dependency chains (the SiLU's, the norm's shuffles)
      // interleave; a wait per row would serialise them.
      const bf16* next = x + (off + ub) * C + c;  // first row of the next run to copy
      auto copy_run = [&](int half, int u) {      // rows u, u + 1, ... of the node
#pragma unroll
        for (int d = 0; d < kRun; ++d)
          if (live && u + d < ue) copy_row<kVec>(&ring[half][d][threadIdx.x], next + d * C);
        next += kRun * C;
        detail::cp_async_commit();
      };
      copy_run(0, ub);
      bf16* op = out + int64_t(off + ub) * ld;
      for (int u0 = ub, half = 0; u0 < ue; u0 += kRun, half ^= 1, op += kRun * ld) {
        copy_run(half ^ 1, u0 + kRun);
        detail::cp_async_wait<1>();
        const Raw<kVec>* run = &ring[half][0][threadIdx.x];
        auto slot = [&](int d) { return live ? run[d * kThreads] : zero_raw<kVec>(); };
        if (u0 + kRun <= ue) {  // uniform: the walk depends only on the tile
#pragma unroll
          for (int d = 0; d < kRun; ++d) row(slot(d), op + d * ld);
        } else {
#pragma unroll
          for (int d = 0; d + 1 < kRun; ++d)
            if (u0 + d < ue) row(slot(d), op + d * ld);
        }
      }

      // Outgoing window: the last K-1 inputs of the node's path, oldest first. When this thread
      // ran to the node's end, hist holds exactly them (incoming-window entries included for a
      // node shorter than K-1); otherwise the node is longer than K-1 and they are rows of x.
      const int slot_out = meta.node_slot_out[n];
      if (live && u_first == 0 && slot_out >= 0 && K > 1) {
        bf16* wdst = window + slot_out * win_ld + c;
#pragma unroll
        for (int j = 0; j < K - 1; ++j) {
          if (ue == len)  // bf16 values widened: the store's rounding gives back their bits
            store_vec<kVec>(wdst + j * C, hist[j]);
          else
            store_raw<kVec>(wdst + j * C, load_raw<kVec>(x + (off + len - (K - 1) + j) * C + c));
        }
      }
    }
  }
}

template <int K>
cudaError_t launch_conv(const bf16* x, const bf16* w, bf16* window, bf16* q, bf16* k, bf16* v,
                        const Split& sp, int vec, float eps, int level, const TreeMeta& meta,
                        cudaStream_t stream) {
  int sms = 0;
  if (const cudaError_t err = detail::multiprocessors(sms); err != cudaSuccess) return err;
  const int64_t ublocks = (int64_t(sp.units) + kThreads - 1) / kThreads;
  const int64_t tiles = (int64_t(meta.n_tokens) + kRows - 1) / kRows;
  const int blocks =
      int(std::max<int64_t>(1, std::min<int64_t>(tiles * ublocks, int64_t(sms) * kBlocksPerSm)));
  switch (vec) {
    case 8:
      gdn_conv_kernel<K, 8>
          <<<blocks, kThreads, 0, stream>>>(x, w, window, q, k, v, sp, eps, level, meta);
      break;
    case 4:
      gdn_conv_kernel<K, 4>
          <<<blocks, kThreads, 0, stream>>>(x, w, window, q, k, v, sp, eps, level, meta);
      break;
    case 2:
      gdn_conv_kernel<K, 2>
          <<<blocks, kThreads, 0, stream>>>(x, w, window, q, k, v, sp, eps, level, meta);
      break;
    default:
      gdn_conv_kernel<K, 1>
          <<<blocks, kThreads, 0, stream>>>(x, w, window, q, k, v, sp, eps, level, meta);
      break;
  }
  return cudaGetLastError();
}

// A vector of `vec` channels may not straddle a head or the q | k | v boundaries, and a head
// takes at most a warp.
bool conv_shape_fits(int dim_k, int64_t value_dim, int vec) {
  return dim_k % vec == 0 && value_dim % vec == 0 && dim_k / vec <= 32;
}

}  // namespace

bool gdn_conv_shape_ok(int dim_k, int64_t value_dim) {
  return dim_k >= 1 && value_dim >= 0 &&
         (conv_shape_fits(dim_k, value_dim, 8) || conv_shape_fits(dim_k, value_dim, 4) ||
          conv_shape_fits(dim_k, value_dim, 2) || conv_shape_fits(dim_k, value_dim, 1));
}

cudaError_t gdn_conv(const bf16* x, const bf16* w, bf16* window, bf16* q, bf16* k, bf16* v,
                     int heads_k, int dim_k, int64_t value_dim, int K, float eps, int level,
                     const TreeMeta& meta, cudaStream_t stream) {
  const int64_t Kd = int64_t(heads_k) * dim_k, C = 2 * Kd + value_dim;
  if (K < 1 || K > kMaxKernel || heads_k < 1 || dim_k < 1 || value_dim < 0 || level < 0 ||
      C > (int64_t(1) << 30))
    return cudaErrorInvalidValue;
  if (meta.n_tokens == 0 || meta.max_level_nodes == 0) return cudaSuccess;
  // Every pointer is addressed in whole vectors (window only when K > 1).
  auto fits = [&](int vec) {
    const uintptr_t bytes = uintptr_t(vec) * sizeof(bf16);
    return conv_shape_fits(dim_k, value_dim, vec) && detail::aligned(x, bytes) &&
           detail::aligned(q, bytes) && detail::aligned(k, bytes) && detail::aligned(v, bytes) &&
           (K == 1 || detail::aligned(window, bytes));
  };
  const int vec = fits(8) ? 8 : fits(4) ? 4 : fits(2) ? 2 : fits(1) ? 1 : 0;
  if (vec == 0)
    return gdn_conv_shape_ok(dim_k, value_dim) ? cudaErrorMisalignedAddress : cudaErrorInvalidValue;
  Split sp;
  sp.C = int(C);
  sp.Kd = int(Kd);
  sp.Vd = int(value_dim);
  sp.dim_k = dim_k;
  sp.group = 1;
  while (sp.group * vec < dim_k) sp.group *= 2;
  sp.qk_units = 2 * heads_k * sp.group;
  sp.units = sp.qk_units + sp.Vd / vec;
  switch (K) {
    case 1:
      return launch_conv<1>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
    case 2:
      return launch_conv<2>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
    case 3:
      return launch_conv<3>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
    case 4:
      return launch_conv<4>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
    case 5:
      return launch_conv<5>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
    case 6:
      return launch_conv<6>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
    case 7:
      return launch_conv<7>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
    default:
      return launch_conv<8>(x, w, window, q, k, v, sp, vec, eps, level, meta, stream);
  }
}

}  // namespace flide::kernels
