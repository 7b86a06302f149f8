// The quantization every FP8 operand goes through (quantize_fp8.cu's rows and tiles, norms.cu's
// rmsnorm_fp8, the 128-column blocks of swiglu_gemm.cu and z_gated_rmsnorm.cu): a group's scale
// (a row's, a block's, a tile's) is its largest magnitude over e4m3's largest finite value (448),
// so that element lands on 448, and each value times 1 / scale rounds to the nearest-even e4m3
// (saturating). A zero group keeps scale 1.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace flide::kernels::detail {

constexpr float kE4m3Max = 448.f;

// The scale of a group whose largest magnitude is amax.
__host__ __device__ __forceinline__ float fp8_scale(float amax) {
  return amax > 0.f ? amax / kE4m3Max : 1.f;
}

// The largest magnitude of a group that each kLanes consecutive lanes hold (a row a warp: 32),
// from each lane's: every lane of the group gets it. All 32 lanes call it.
template <int kLanes = 32>
__device__ __forceinline__ float group_amax(float amax) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax;
}

// The scale of such a group.
template <int kLanes = 32>
__device__ __forceinline__ float fp8_row_scale(float amax) {
  return fp8_scale(group_amax<kLanes>(amax));
}

// f times inv as 8 e4m3 bytes at q (8-byte aligned).
__device__ __forceinline__ void store_e4m3x8(uint8_t* q, const float (&f)[8], float inv) {
  uint32_t pairs[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    pairs[k] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * k] * inv, f[2 * k + 1] * inv),
                                        __NV_SATFINITE, __NV_E4M3);
  *reinterpret_cast<uint2*>(q) = make_uint2(pairs[0] | pairs[1] << 16, pairs[2] | pairs[3] << 16);
}

}  // namespace flide::kernels::detail
