// Causal depthwise conv + SiLU over one tree level (spec qwen3_5.md §4 step 2), the CUDA twin of
// CpuOps::causal_conv_silu. Memory-bound: every input row is read once and every output row
// written once, so the level's rows are cut into flat tiles of kRows stream rows and a thread
// owns kVec (4) adjacent channels of one tile, sliding the K-1 previous inputs through registers.
//
// A tile may hold the tail of one node and the head of the next; a thread walks its rows node
// by node (token_node). The rows a node reads from its incoming window (its first K-1) are all
// handled by the thread whose tile holds the node's first row, even when they spill into the
// next tile, and that same thread writes the node's outgoing window after having read the
// incoming one: so for each channel exactly one thread touches a node's window slots, and a node
// may read and write the same slot. The grid is capped and walks its items in a stride loop, so
// a launch costs the same whatever the level's share of the stream.
#include <algorithm>
#include <cstdint>

#include "kernels/gdn.h"

namespace flide::kernels {

using bf16 = __nv_bfloat16;

namespace {

constexpr int kThreads = 128;
constexpr int kRows = 32;  // stream rows per tile
constexpr int kMaxKernel = 8;
constexpr int kBlocksPerSm = 16;  // grid cap (resident blocks of 128 threads per SM)

template <typename T>
__device__ __forceinline__ T lesser(T a, T b) {
  return a < b ? a : b;
}
template <typename T>
__device__ __forceinline__ T greater(T a, T b) {
  return a < b ? b : a;
}

// kVec bf16 <-> fp32 (exact widening; one round-to-nearest on the way back).
template <int kVec>
__device__ __forceinline__ void load_vec(const bf16* p, float (&f)[kVec]) {
  if constexpr (kVec == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    f[0] = __uint_as_float(u.x << 16), f[1] = __uint_as_float(u.x & 0xffff0000u);
    f[2] = __uint_as_float(u.y << 16), f[3] = __uint_as_float(u.y & 0xffff0000u);
  } else if constexpr (kVec == 2) {
    const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(p);
    f[0] = __low2float(h);
    f[1] = __high2float(h);
  } else {
    f[0] = __bfloat162float(*p);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

template <int kVec>
__device__ __forceinline__ void store_vec(bf16* p, const float (&f)[kVec]) {
  if constexpr (kVec == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]));
  } else if constexpr (kVec == 2) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(f[0], f[1]);
  } else {
    *p = __float2bfloat16_rn(f[0]);
  }
}

// grid: min(tiles * channel blocks, cap), stride loop over (tile, channel block) items.
// K <= 5: 64 registers, >= 1024 threads per SM keep enough loads in flight.
template <int K, int kVec>
__global__ void __launch_bounds__(kThreads, K <= 5 ? 8 : 4)
    conv_silu_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* window,
                     bf16* __restrict__ out, int64_t C, int level, TreeMeta meta) {
  constexpr int kHist = K > 1 ? K - 1 : 1;  // register arrays cannot be empty
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  if (nb >= ne) return;
  // Levels occupy contiguous stream rows (backend/stream.h: ordered by level, no gaps).
  const int64_t r_first = meta.node_offset[nb];
  const int64_t r_last = int64_t(meta.node_offset[ne - 1]) + meta.node_length[ne - 1];
  const int64_t tiles = (r_last - r_first + kRows - 1) / kRows;
  const int64_t cblocks = (C + int64_t(kThreads) * kVec - 1) / (int64_t(kThreads) * kVec);
  const int64_t win_ld = int64_t(K - 1) * C;

  for (int64_t item = blockIdx.x; item < tiles * cblocks; item += gridDim.x) {
    const int64_t c = ((item % cblocks) * kThreads + threadIdx.x) * kVec;
    if (c >= C) continue;  // no block-wide synchronisation in this kernel
    const int64_t r_begin = r_first + (item / cblocks) * kRows;
    const int64_t r_end = lesser<int64_t>(r_begin + kRows, r_last);

    float wt[K][kVec];  // w[c + v][j]; j = K - 1 multiplies the current row
#pragma unroll
    for (int v = 0; v < kVec; ++v)
#pragma unroll
      for (int j = 0; j < K; ++j) wt[j][v] = __bfloat162float(w[(c + v) * K + j]);

    for (int64_t r = r_begin; r < r_end;) {
      const int n = meta.token_node[r];
      if (n < nb || n >= ne) {  // not expected: the level's rows are contiguous
        ++r;
        continue;
      }
      const int64_t off = meta.node_offset[n];
      const int len = meta.node_length[n];
      const int u_first = int(r - off);                               // node row of r
      const int u_tile_end = int(lesser<int64_t>(len, r_end - off));  // node rows in tile
      // Rows [0, prefix) read the incoming window: the tile holding row 0 does all of them.
      const int prefix = lesser(len, K - 1);
      const int ub = u_first == 0 ? 0 : greater(u_first, prefix);
      const int ue = u_first == 0 ? greater(u_tile_end, prefix) : u_tile_end;
      r = off + u_tile_end;
      if (ub >= ue) continue;  // (only for u_first > 0: the tile-0 thread wrote the window)

      // hist[j]: input of node row ub - (K-1) + j; before row 0 from slot_in (or zeros).
      const int slot_in = meta.node_slot_in[n];
      float hist[kHist][kVec];
#pragma unroll
      for (int j = 0; j < K - 1; ++j) {
        const int u = ub - (K - 1) + j;
        if (u >= 0) {
          load_vec<kVec>(x + (off + u) * C + c, hist[j]);
        } else if (slot_in >= 0) {
          load_vec<kVec>(window + slot_in * win_ld + int64_t(K - 1 + u) * C + c, hist[j]);
        } else {
#pragma unroll
          for (int v = 0; v < kVec; ++v) hist[j][v] = 0.f;
        }
      }
#pragma unroll 2
      for (int u = ub; u < ue; ++u) {
        float xv[kVec], y[kVec];
        load_vec<kVec>(x + (off + u) * C + c, xv);
#pragma unroll
        for (int v = 0; v < kVec; ++v) {
          float acc = 0.f;  // same order as the CPU: oldest input first
#pragma unroll
          for (int j = 0; j < K - 1; ++j) acc += wt[j][v] * hist[j][v];
          acc += wt[K - 1][v] * xv[v];
          y[v] = acc / (1.f + __expf(-acc));  // silu
        }
        store_vec<kVec>(out + (off + u) * C + c, y);
#pragma unroll
        for (int j = 0; j + 1 < K - 1; ++j)
#pragma unroll
          for (int v = 0; v < kVec; ++v) hist[j][v] = hist[j + 1][v];
        if constexpr (K > 1) {
#pragma unroll
          for (int v = 0; v < kVec; ++v) hist[K - 2][v] = xv[v];
        }
      }

      // Outgoing window: the last K-1 inputs of the node's path, oldest first. When this thread
      // ran to the node's end, hist holds exactly them (incoming-window entries included for a
      // node shorter than K-1); otherwise the node is longer than K-1 and they are rows of x.
      const int slot_out = meta.node_slot_out[n];
      if (u_first == 0 && slot_out >= 0 && K > 1) {
        bf16* dst = window + slot_out * win_ld + c;
#pragma unroll
        for (int j = 0; j < K - 1; ++j) {
          if (ue == len) {
            store_vec<kVec>(dst + int64_t(j) * C, hist[j]);
          } else {
            float t[kVec];
            load_vec<kVec>(x + (off + len - (K - 1) + j) * C + c, t);
            store_vec<kVec>(dst + int64_t(j) * C, t);
          }
        }
      }
    }
  }
}

template <int K>
cudaError_t launch_conv(const bf16* x, const bf16* w, bf16* window, bf16* out, int64_t C, int vec,
                        int level, const TreeMeta& meta, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  const int64_t cblocks = (C + int64_t(kThreads) * vec - 1) / (int64_t(kThreads) * vec);
  const int64_t tiles = (int64_t(meta.n_tokens) + kRows - 1) / kRows;
  const int blocks =
      int(std::max<int64_t>(1, std::min<int64_t>(tiles * cblocks, int64_t(sms) * kBlocksPerSm)));
  switch (vec) {
    case 4:
      conv_silu_kernel<K, 4><<<blocks, kThreads, 0, stream>>>(x, w, window, out, C, level, meta);
      break;
    case 2:
      conv_silu_kernel<K, 2><<<blocks, kThreads, 0, stream>>>(x, w, window, out, C, level, meta);
      break;
    default:
      conv_silu_kernel<K, 1><<<blocks, kThreads, 0, stream>>>(x, w, window, out, C, level, meta);
      break;
  }
  return cudaGetLastError();
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

cudaError_t causal_conv_silu(const bf16* x, const bf16* w, bf16* window, bf16* out, int64_t C,
                             int K, int level, const TreeMeta& meta, cudaStream_t stream) {
  if (K < 1 || K > kMaxKernel || C < 1 || level < 0) return cudaErrorInvalidValue;
  if (meta.n_tokens == 0 || meta.max_level_nodes == 0) return cudaSuccess;
  // window is only touched when K > 1; x, out and window are addressed in whole vectors.
  const bool win8 = K == 1 || aligned(window, 8), win4 = K == 1 || aligned(window, 4);
  const int vec = C % 4 == 0 && aligned(x, 8) && aligned(out, 8) && win8   ? 4
                  : C % 2 == 0 && aligned(x, 4) && aligned(out, 4) && win4 ? 2
                                                                           : 1;
  switch (K) {
    case 1:
      return launch_conv<1>(x, w, window, out, C, vec, level, meta, stream);
    case 2:
      return launch_conv<2>(x, w, window, out, C, vec, level, meta, stream);
    case 3:
      return launch_conv<3>(x, w, window, out, C, vec, level, meta, stream);
    case 4:
      return launch_conv<4>(x, w, window, out, C, vec, level, meta, stream);
    case 5:
      return launch_conv<5>(x, w, window, out, C, vec, level, meta, stream);
    case 6:
      return launch_conv<6>(x, w, window, out, C, vec, level, meta, stream);
    case 7:
      return launch_conv<7>(x, w, window, out, C, vec, level, meta, stream);
    default:
      return launch_conv<8>(x, w, window, out, C, vec, level, meta, stream);
  }
}

}  // namespace flide::kernels
