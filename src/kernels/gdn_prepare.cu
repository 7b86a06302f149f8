// The chunked delta rule's state-free half (gdn.h): "plan" lists a level's
// chunks, "prepare" computes everything a chunk needs that does not depend on
// the state, one block per (chunk, value head), all in parallel. The prepare
// kernel's 64x64 triangular inverse is done blockwise (16x16 diagonal blocks by
// forward substitution, then the off-diagonal blocks by small products), and
// its four products (K K^T, Q K^T, T K, T V) use tensor cores.
//
// Chunk rows past a node's end (its last chunk may be short) are zeros in
// shared memory (k, q, v, beta, g): they change neither the real rows' outputs
// nor the state, like HF's padding. Those rows are never written back:
// workspace rows are indexed by stream row.
#include <algorithm>

#include "kernels/gdn_chunk.cuh"

namespace flide::kernels::gdn_detail {
namespace {

constexpr int kPlanThreads = 1024;

// Shared-memory layout of the prepare kernel (bytes).
template <int DK, int DV> struct PrepCfg : Dims<DK, DV> {
  using D = Dims<DK, DV>;
  static constexpr int kPrepK = 0;
  static constexpr int kPrepQ = kPrepK + kChunk * D::kLdH * 2;
  static constexpr int kPrepV = kPrepQ + kChunk * D::kLdH * 2;
  static constexpr int kPrepL = kPrepV + kChunk * D::kLdV * 2;
  static constexpr int kPrepT = kPrepL + kChunk * D::kLdC * 4;
  static constexpr int kPrepY = kPrepT + kChunk * D::kLdC * 4;
  static constexpr int kPrepBeta = kPrepY + 16 * D::kLdC * 4;
  static constexpr int kPrepGam = kPrepBeta + kChunk * 4;
  static constexpr int kPrepBk = kPrepGam + kChunk * 4;
  static constexpr int kPrepBytes = kPrepBk + kChunk * 4;
  static_assert(kPrepQ % 16 == 0 && kPrepV % 16 == 0 && kPrepL % 16 == 0 &&
                    kPrepY % 16 == 0 && kPrepBeta % 16 == 0,
                "16-byte aligned regions for cp.async");
};

// ---------------------------------------------------------------------------------------------
// Plan: the level's chunks, in node order. One block of kPlanThreads.

__global__ void __launch_bounds__(kPlanThreads)
    gdn_plan_kernel(int2 *chunks, int level, TreeMeta meta) {
  __shared__ int warp_sum[kPlanThreads / 32];
  __shared__ int base;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nb = meta.level_begin[level], ne = meta.level_begin[level + 1];
  if (threadIdx.x == 0)
    base = 0;
  __syncthreads();
  for (int first = nb; first < ne; first += kPlanThreads) {
    const int n = first + int(threadIdx.x);
    const int count = n < ne ? (meta.node_length[n] + kChunk - 1) / kChunk : 0;
    int incl = count; // inclusive scan over the block
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, d);
      if (lane >= d)
        incl += y;
    }
    if (lane == 31)
      warp_sum[warp] = incl;
    __syncthreads();
    if (warp == 0) {
      int s = warp_sum[lane];
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, s, d);
        if (lane >= d)
          s += y;
      }
      warp_sum[lane] = s;
    }
    __syncthreads();
    const int start = base + (warp > 0 ? warp_sum[warp - 1] : 0) + incl - count;
    for (int c = 0; c < count; ++c)
      chunks[1 + start + c] = make_int2(n, c * kChunk);
    __syncthreads(); // everyone has read base and warp_sum
    if (threadIdx.x == 0)
      base += warp_sum[31];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    chunks[0] = make_int2(base, 0);
}

// ---------------------------------------------------------------------------------------------
// Prepare: per (chunk, value head) gamma, P, W, U. Stride loop over items =
// chunk * Hv + head.

template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 2)
    gdn_prepare_kernel(const bf16 *__restrict__ q, const bf16 *__restrict__ k,
                       const bf16 *__restrict__ v, const float *__restrict__ g,
                       const float *__restrict__ beta, Workspace ws,
                       int heads_k, int heads_v, float scale, TreeMeta meta) {
  using C = PrepCfg<DK, DV>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *Ks = reinterpret_cast<bf16 *>(
      smem + C::kPrepK); // [64][kLdH] keys of the chunk
  bf16 *Qs = reinterpret_cast<bf16 *>(smem + C::kPrepQ); // [64][kLdH] queries
  bf16 *Vs = reinterpret_cast<bf16 *>(smem + C::kPrepV); // [64][kLdV] values
  float *Ls = reinterpret_cast<float *>(
      smem + C::kPrepL); // [64][kLdC] -A (strictly lower)
  float *Ts =
      reinterpret_cast<float *>(smem + C::kPrepT); // [64][kLdC] (I + A)^-1
  float *Ys = reinterpret_cast<float *>(
      smem + C::kPrepY); // [16][kLdC] scratch of the inverse
  float *beta_s = reinterpret_cast<float *>(smem + C::kPrepBeta); // [64]
  float *gam_s =
      reinterpret_cast<float *>(smem + C::kPrepGam); // [64] cumulative g
  float *bk_s =
      reinterpret_cast<float *>(smem + C::kPrepBk); // [64] beta exp(gamma)
  constexpr int kLdH = C::kLdH, kLdC = C::kLdC;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2,
            t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK, v_ld = int64_t(heads_v) * DV;
  const int group = heads_v / heads_k;
  const int items = ws.chunks[0].x * heads_v;

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int head = item % heads_v, kh = head / group;
    const int2 chunk = ws.chunks[1 + item / heads_v];
    const int nrows = min(kChunk, meta.node_length[chunk.x] - chunk.y);
    const int64_t t0 =
        int64_t(meta.node_offset[chunk.x]) + chunk.y; // first stream row
    const int64_t hrow = int64_t(head) * T + t0;      // workspace row of t0

    __syncthreads(); // the previous item is done with shared memory
    load_tile<bf16, C::kVecK, C::kKp, kLdH>(Ks, k + t0 * qk_ld + kh * DK, qk_ld,
                                            nrows, DK);
    load_tile<bf16, C::kVecK, C::kKp, kLdH>(Qs, q + t0 * qk_ld + kh * DK, qk_ld,
                                            nrows, DK);
    load_tile<bf16, C::kVecV, C::kVp, C::kLdV>(Vs, v + t0 * v_ld + head * DV,
                                               v_ld, nrows, DV);
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
    if (threadIdx.x == 0) { // gamma_i = gamma_{i-1} + g_i, in the CPU's order
      float x[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i)
        x[i] = gam_s[i];
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
      if (i < nrows)
        ws.gam[hrow + i] = gam_s[i];
    }

    // K K^T -> Ls = -(beta_i k_i.k_j exp(gamma_i - gamma_j)) for j < i;
    // Q K^T -> P = scale q_i.k_j exp(gamma_i - gamma_j) for j <= i (to the
    // workspace). Warp: rows 16 mt.., columns 32 nh.. (four n8 tiles).
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
            const float decay =
                j + e <= i ? __expf(gam_s[i] - gam_s[j + e]) : 0.f;
            Ls[i * kLdC + j + e] =
                j + e < i ? -(beta_s[i] * acc_k[s][2 * h + e] * decay) : 0.f;
            p[e] = j + e <= i ? scale * acc_q[s][2 * h + e] * decay : 0.f;
          }
          if (i < nrows)
            *reinterpret_cast<float2 *>(ws.P + (hrow + i) * kChunk + j) =
                make_float2(round_tf32(p[0]), round_tf32(p[1]));
        }
      }
    }
    __syncthreads();

    // T = (I - L)^-1, blockwise on 16x16 blocks. Diagonal blocks by forward
    // substitution, one column per thread (the CPU's order: T_ij = L_ij +
    // sum_{j<m<i} L_im T_mj).
    if (threadIdx.x < kChunk) {
      const int col = threadIdx.x, b0 = col & ~15;
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const int i = b0 + r;
        float acc = i == col ? 1.f : 0.f;
#pragma unroll
        for (int m = 0; m < r; ++m)
          acc += Ls[i * kLdC + b0 + m] * Ts[(b0 + m) * kLdC + col];
        Ts[i * kLdC + col] = acc;
      }
    }
    // Block row b, columns c < 16 b: (I - L_bb) T_bc = sum_{e<b} L_be T_ec =:
    // Y, T_bc = T_bb Y.
#pragma unroll
    for (int bb = 1; bb < 4; ++bb) {
      const int r0 = 16 * bb;
      __syncthreads();
      for (int e = threadIdx.x; e < 16 * r0; e += kThreads) {
        const int r = e / r0, c = e % r0;
        float y = 0.f;
        for (int m = c; m < r0; ++m)
          y += Ls[(r0 + r) * kLdC + m] * Ts[m * kLdC + c];
        Ys[r * kLdC + c] = y;
      }
      __syncthreads();
      for (int e = threadIdx.x; e < 16 * r0; e += kThreads) {
        const int r = e / r0, c = e % r0;
        float acc = 0.f;
        for (int m = 0; m <= r; ++m)
          acc += Ts[(r0 + r) * kLdC + r0 + m] * Ys[m * kLdC + c];
        Ts[(r0 + r) * kLdC + c] = acc;
      }
    }
    __syncthreads();

    // W = T (beta exp(gamma) K) [64 x Dk], U = T (beta V) [64 x Dv]. Warp: rows
    // 16 mt.., n8 tiles nh, nh + 2, ...
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
            frag_b(b, Vs + 8 * kk * C::kLdV + 8 * nt, C::kLdV, g8, t4, fv0,
                   fv1);
            mma(acc_u[s], a, b);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 16 * mt + g8 + 8 * h;
        if (i >= nrows)
          continue;
#pragma unroll
        for (int s = 0; s < (kTilesW + 1) / 2; ++s) {
          const int j = 8 * (nh + 2 * s) + 2 * t4;
          if (j < DK)
            *reinterpret_cast<float2 *>(ws.W + (hrow + i) * DK + j) =
                make_float2(round_tf32(acc_w[s][2 * h]),
                            round_tf32(acc_w[s][2 * h + 1]));
        }
#pragma unroll
        for (int s = 0; s < (kTilesU + 1) / 2; ++s) {
          const int j = 8 * (nh + 2 * s) + 2 * t4;
          if (j < DV)
            *reinterpret_cast<float2 *>(ws.U + (hrow + i) * DV + j) =
                make_float2(acc_u[s][2 * h], acc_u[s][2 * h + 1]);
        }
      }
    }
  }
}

} // namespace

cudaError_t launch_plan(const GdnArgs &a) {
  gdn_plan_kernel<<<1, kPlanThreads, 0, a.stream>>>(a.ws.chunks, a.level,
                                                    a.meta);
  return cudaGetLastError();
}

template <int DK, int DV> cudaError_t launch_prepare(const GdnArgs &a) {
  using C = PrepCfg<DK, DV>;
  cudaError_t err = cudaFuncSetAttribute(
      gdn_prepare_kernel<DK, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      C::kPrepBytes);
  if (err != cudaSuccess)
    return err;
  // About 4 waves of 2 resident blocks per SM.
  const int blocks = int(std::max<int64_t>(
      1, std::min<int64_t>(max_level_chunks(a.meta) * a.heads_v,
                           int64_t(a.sms) * 8)));
  gdn_prepare_kernel<DK, DV><<<blocks, kThreads, C::kPrepBytes, a.stream>>>(
      a.q, a.k, a.v, a.g, a.beta, a.ws, a.heads_k, a.heads_v, a.scale, a.meta);
  return cudaGetLastError();
}

#define FLIDE_GDN_INSTANTIATE(DK, DV)                                          \
  template cudaError_t launch_prepare<DK, DV>(const GdnArgs &);
FLIDE_GDN_SHAPES(FLIDE_GDN_INSTANTIATE)
#undef FLIDE_GDN_INSTANTIATE

} // namespace flide::kernels::gdn_detail
