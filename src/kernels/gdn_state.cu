// The chunked delta rule's sequential half (gdn.h): one block per (node, value head, slice of
// kVb value columns) walks the node's chunks in order with its slice of the state in registers.
// Per chunk it does only what the next chunk's state depends on, plus the one product that needs
// the state entering the chunk:
//   v_new = U - W S                 (replaces U in the workspace)
//   O     = Dk^-1/2 exp(gamma) (q S) (to the workspace; the output kernel adds P v_new)
//   S     = exp(gamma_last) S + K^T (f v_new),  f_j = exp(gamma_last - gamma_j).
// Why this split: one 5000-row trunk with 16 value heads is 16 sequences of 79 chunks, so this
// loop is the latency floor of the whole layer; everything that can wait for v_new (P v_new and
// the bf16 output) runs afterwards in a fully parallel kernel. The state columns are independent
// given W, U and gamma, hence the slices (64 blocks for that trunk).
//
// On the H200 a chunk step takes ~5 us and no single resource bounds it (tensor cores ~17% busy,
// ~1,300 instructions per warp at ~5 cycles each); removing any one part (loads, either product,
// the stores) saves 18-28%. Measured and not faster: 16-column slices, sixteen warps splitting
// phase A's k range, operands permuted for 16-byte loads and ldmatrix.trans, predicate-free
// whole-tile loads, per-row bulk (TMA) copies. The next step is wgmma fed by 2D tensor maps
// (bench/results/2026-11-29-decide.md).
//
// Chunk rows past a node's end are zeros in shared memory (W, q, k, U, gamma and f): they change
// neither the real rows' outputs nor the state, and they are never written back.
#include "kernels/gdn_chunk.cuh"

namespace flide::kernels::gdn_detail {
namespace {

// Shapes and shared-memory layout (bytes): two stages (chunk c and c + 1 in flight), then the
// state operand and f v_new.
template <int DK, int DV>
struct StateCfg : Dims<DK, DV> {
  using D = Dims<DK, DV>;
  static constexpr int kVb = D::kVp < 32 ? D::kVp : 32;  // value columns of one block
  static constexpr int kSplits = (DV + kVb - 1) / kVb;
  static constexpr int kLdS = kVb + 8;  // fp32 rows of a slice: S, U, f v_new

  static constexpr int kStW = 0;
  static constexpr int kStQ = kStW + kChunk * D::kLdW * 4;
  static constexpr int kStK = kStQ + kChunk * D::kLdH * 2;
  static constexpr int kStU = kStK + kChunk * D::kLdH * 2;
  static constexpr int kStGam = kStU + kChunk * kLdS * 4;
  static constexpr int kStBytes = kStGam + kChunk * 4;
  static constexpr int kS = 2 * kStBytes;
  static constexpr int kVf = kS + D::kKp * kLdS * 4;
  static constexpr int kBytes = kVf + kChunk * kLdS * 4;

  static_assert(kStQ % 16 == 0 && kStK % 16 == 0 && kStU % 16 == 0 && kStBytes % 16 == 0 &&
                    kVf % 16 == 0,
                "16-byte aligned regions for cp.async and ldmatrix");
  static_assert(kBytes <= 227 * 1024, "shared memory");
};

// Stride loop over items = (node * Hv + head) * kSplits + split, so a head's slices run side by
// side and share their W, q, k reads in L2.
template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_state_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, float* state,
                     Workspace ws, int heads_k, int heads_v, int level, float scale,
                     TreeMeta meta) {
  using C = StateCfg<DK, DV>;
  constexpr int kLdH = C::kLdH, kLdW = C::kLdW, kLdS = C::kLdS;
  constexpr int kTilesN = C::kVb / 8;                   // n8 tiles of the slice
  constexpr int kTilesS = C::kKp / 16;                  // m16 tiles of the state rows
  constexpr int kSa = (kTilesN + 1) / 2;                // phase A: n8 tiles per warp
  constexpr int kSm = (kTilesS + kWarps - 1) / kWarps;  // phase C: state m16 tiles per warp
  constexpr bool kEvenN = kTilesN % 2 == 0;             // every warp's phase-A tiles exist
  extern __shared__ __align__(16) unsigned char smem[];
  struct Stage {
    float* W;    // [64][kLdW]
    bf16* Q;     // [64][kLdH]
    bf16* K;     // [64][kLdH]
    float* U;    // [64][kLdS] the slice's columns
    float* gam;  // [64]
  };
  auto stage = [&](int b) {
    unsigned char* base = smem + b * C::kStBytes;
    return Stage{reinterpret_cast<float*>(base + C::kStW), reinterpret_cast<bf16*>(base + C::kStQ),
                 reinterpret_cast<bf16*>(base + C::kStK), reinterpret_cast<float*>(base + C::kStU),
                 reinterpret_cast<float*>(base + C::kStGam)};
  };
  float* Ss = reinterpret_cast<float*>(smem + C::kS);   // [kKp][kLdS] state entering, tf32
  float* Vf = reinterpret_cast<float*>(smem + C::kVf);  // [64][kLdS] f v_new, tf32

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens;
  const int64_t qk_ld = int64_t(heads_k) * DK;
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
          if (mt < kTilesS) Ss[row * kLdS + col] = round_tf32(val);
        }
      }
    }
    if (n_chunks > 0) issue(0, stage(0));

    for (int ci = 0; ci < n_chunks; ++ci) {
      const Stage st = stage(ci & 1);
      const int c0 = ci * kChunk, nrows = min(kChunk, len - c0);
      cp_async_wait_all();
      __syncthreads();  // stage ci and S visible; chunk ci - 1 done with the other stage and Vf
      if (ci + 1 < n_chunks) issue(ci + 1, stage((ci + 1) & 1));

      // Phase A: v_new = U - W S and O = scale exp(gamma) (q S), sharing the B fragments of S.
      // Warp: rows 16 mt.., n8 tiles nh, nh + 2, ...
      const int mt = warp & 3, nh = warp >> 2;
      float acc_v[kSa][4] = {}, acc_o[kSa][4] = {};
#pragma unroll
      for (int kk = 0; kk < C::kKp / 8; ++kk) {
        uint32_t aw[4], aq[4];
        frag_a_tf32(aw, st.W + 16 * mt * kLdW + 8 * kk, kLdW, lane);
        frag_a(aq, st.Q + 16 * mt * kLdH + 8 * kk, kLdH, g8, t4);
#pragma unroll
        for (int s = 0; s < kSa; ++s) {
          const int nt = nh + 2 * s;
          if (kEvenN || nt < kTilesN) {
            uint32_t b[2];
            frag_b_tf32(b, Ss + 8 * kk * kLdS + 8 * nt, kLdS, g8, t4);
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
        const float f = i < nrows ? __expf(gam_last - st.gam[i]) : 0.f;
        const int64_t wrow = (hrow + c0 + i) * DV + v0;  // workspace row of U, O
#pragma unroll
        for (int s = 0; s < kSa; ++s) {
          const int nt = nh + 2 * s;
          if (kEvenN || nt < kTilesN) {
            const int j = 8 * nt + 2 * t4;
            const float2 u = *reinterpret_cast<const float2*>(st.U + i * kLdS + j);
            const float vn0 = u.x - acc_v[s][2 * h], vn1 = u.y - acc_v[s][2 * h + 1];
            *reinterpret_cast<float2*>(Vf + i * kLdS + j) =
                make_float2(round_tf32(vn0 * f), round_tf32(vn1 * f));
            if (i < nrows && j < vcols) {  // vcols is even, so j + 1 < vcols too
              *reinterpret_cast<float2*>(ws.U + wrow + j) =
                  make_float2(round_tf32(vn0), round_tf32(vn1));
              *reinterpret_cast<float2*>(ws.O + wrow + j) =
                  make_float2(acc_o[s][2 * h] * e, acc_o[s][2 * h + 1] * e);
            }
          }
        }
      }
      __syncthreads();  // f v_new complete; every warp is done reading Ss

      // Phase C: S = exp(gamma_last) S + K^T (f v_new), into registers and Ss.
      const float decay = __expf(gam_last);
#pragma unroll
      for (int sm = 0; sm < kSm; ++sm)
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[sm][nt][e] *= decay;
#pragma unroll
      for (int kk = 0; kk < kChunk / 8; ++kk) {
        uint32_t b[kTilesN][2];
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt)
          frag_b_tf32(b[nt], Vf + 8 * kk * kLdS + 8 * nt, kLdS, g8, t4);
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
                make_float2(round_tf32(sacc[sm][nt][2 * h]), round_tf32(sacc[sm][nt][2 * h + 1]));
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

}  // namespace

template <int DK, int DV>
cudaError_t launch_state(const GdnArgs& a) {
  using C = StateCfg<DK, DV>;
  const int blocks =
      stride_grid(int64_t(a.meta.max_level_nodes) * a.heads_v * C::kSplits, a.sms, 2);
  return launch_with_smem(gdn_state_kernel<DK, DV>, blocks, C::kBytes, a.stream, a.q, a.k, a.state,
                          a.ws, a.heads_k, a.heads_v, a.level, a.scale, a.meta);
}

#define FLIDE_GDN_INSTANTIATE(DK, DV) template cudaError_t launch_state<DK, DV>(const GdnArgs&);
FLIDE_GDN_SHAPES(FLIDE_GDN_INSTANTIATE)
#undef FLIDE_GDN_INSTANTIATE

}  // namespace flide::kernels::gdn_detail
