// The chunked delta rule's output (gdn.h): out = O + P v_new per (chunk, value head), all in
// parallel once the state kernel has left O (the inter-chunk part, q against the state entering
// the chunk) and v_new in the workspace. P v_new is the intra-chunk part: row i against the
// chunk's rows j <= i. The accumulation starts from O and adds P v_new over the chunk's rows in
// order in fp32, then rounds to bf16 once.
#include "kernels/gdn_chunk.cuh"

namespace flide::kernels::gdn_detail {
namespace {

template <int DK, int DV>
struct OutputCfg : Dims<DK, DV> {
  using D = Dims<DK, DV>;
  static constexpr int kP = 0;
  static constexpr int kV = kP + kChunk * D::kLdC * 4;
  static constexpr int kBytes = kV + kChunk * D::kLdV * 4;
  static_assert(kV % 16 == 0, "16-byte aligned regions for cp.async and ldmatrix");
};

// Stride loop over items = chunk * Hv + head.
template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 3)
    gdn_output_kernel(bf16* __restrict__ out, Workspace ws, int heads_v, TreeMeta meta) {
  using C = OutputCfg<DK, DV>;
  constexpr int kLdC = C::kLdC, kLdV = C::kLdV;
  constexpr int kTilesN = C::kVp / 8;
  constexpr int kSn = (kTilesN + 1) / 2;     // n8 tiles per warp
  constexpr bool kEvenN = kTilesN % 2 == 0;  // every warp's tiles exist
  extern __shared__ __align__(16) unsigned char smem[];
  float* Ps = reinterpret_cast<float*>(smem + C::kP);  // [64][kLdC] P, tf32
  float* Vs = reinterpret_cast<float*>(smem + C::kV);  // [64][kLdV] v_new, tf32

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, t4 = lane & 3;
  const int64_t T = meta.n_tokens, out_ld = int64_t(heads_v) * DV;
  const int items = ws.chunks[0].x * heads_v;
  const int mt = warp & 3, nh = warp >> 2;  // rows 16 mt.., n8 tiles nh, nh + 2, ...

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int head = item % heads_v;
    const int2 chunk = ws.chunks[1 + item / heads_v];
    const int nrows = min(kChunk, meta.node_length[chunk.x] - chunk.y);
    const int64_t t0 = int64_t(meta.node_offset[chunk.x]) + chunk.y;  // first stream row
    const int64_t hrow = int64_t(head) * T + t0;                      // workspace row of t0

    __syncthreads();  // the previous item is done with shared memory
    load_tile<float, 4, kChunk, kLdC>(Ps, ws.P + hrow * kChunk, kChunk, nrows, kChunk);
    load_tile<float, 4, C::kVp, kLdV>(Vs, ws.U + hrow * DV, DV, nrows, DV);
    cp_async_commit();

    float acc[kSn][4];
#pragma unroll
    for (int s = 0; s < kSn; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 16 * mt + g8 + 8 * h, j = 8 * (nh + 2 * s) + 2 * t4;
        float2 o = make_float2(0.f, 0.f);
        if (i < nrows && j < DV) o = *reinterpret_cast<const float2*>(ws.O + (hrow + i) * DV + j);
        acc[s][2 * h] = o.x;
        acc[s][2 * h + 1] = o.y;
      }
    cp_async_wait_all();
    __syncthreads();

#pragma unroll
    for (int kk = 0; kk < kChunk / 8; ++kk) {
      uint32_t ap[4];
      frag_a_tf32(ap, Ps + 16 * mt * kLdC + 8 * kk, kLdC, lane);
#pragma unroll
      for (int s = 0; s < kSn; ++s) {
        const int nt = nh + 2 * s;
        if (kEvenN || nt < kTilesN) {
          uint32_t b[2];
          frag_b_tf32(b, Vs + 8 * kk * kLdV + 8 * nt, kLdV, g8, t4);
          mma(acc[s], ap, b);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 16 * mt + g8 + 8 * h;
      if (i >= nrows) continue;
#pragma unroll
      for (int s = 0; s < kSn; ++s) {
        const int j = 8 * (nh + 2 * s) + 2 * t4;
        if (j < DV)  // DV is even, so j + 1 < DV too
          *reinterpret_cast<__nv_bfloat162*>(out + (t0 + i) * out_ld + head * DV + j) =
              __floats2bfloat162_rn(acc[s][2 * h], acc[s][2 * h + 1]);
      }
    }
  }
}

}  // namespace

template <int DK, int DV>
cudaError_t launch_output(const GdnArgs& a) {
  // About 3 resident blocks per SM, a few waves.
  const int blocks = stride_grid(max_level_chunks(a.meta) * a.heads_v, a.sms, 6);
  return launch_with_smem(gdn_output_kernel<DK, DV>, blocks, OutputCfg<DK, DV>::kBytes, a.stream,
                          a.out, a.ws, a.heads_v, a.meta);
}

#define FLIDE_GDN_INSTANTIATE(DK, DV) template cudaError_t launch_output<DK, DV>(const GdnArgs&);
FLIDE_GDN_SHAPES(FLIDE_GDN_INSTANTIATE)
#undef FLIDE_GDN_INSTANTIATE

}  // namespace flide::kernels::gdn_detail
