// Device helpers shared by the dense kernels (norms.cu, elementwise.cu, readout.cu,
// attention_prep.cu) and the Gated DeltaNet conv (gdn_conv.cu): 8-element bf16 chunks moved as
// one 16-byte access, unpacked to fp32 for the arithmetic or kept as raw bf16 bits where they are
// only copied; two values packed as a bf16 pair (also the mma fragments' packing, mma_bf16.cuh);
// the RMS norm's factor; lane-group sums; the pointer-alignment test of their launchers (and of
// the chunked delta rule's, gdn_chunk.cu).
//
// A chunk is elements [8c, 8c + 8) of a row. A kernel takes the vector path only when every
// pointer it touches is 16-byte aligned and every row starts on a chunk boundary (the caller's
// `vec` flag); otherwise, and for the last partial chunk of a row, the same chunk is moved element
// by element, missing elements reading as 0. Both paths give the same values in the same order,
// so a reduction's result never depends on which path a launch took.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace flide::kernels::detail {

// Grid cap of the grid-stride launches: several waves of 256-thread blocks on 132 SMs; larger
// inputs loop inside the kernel.
constexpr int64_t kMaxBlocks = 4096;

inline bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

inline bool aligned16(const void* p) {
  return aligned(p, 16);
}

inline int blocks_for(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return int(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// `valid`: elements of the row left from p (only the first 8 matter).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, int64_t valid, bool vec,
                                      float (&f)[8]) {
  if (vec && valid >= 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 t = __bfloat1622float2(h[k]);
      f[2 * k] = t.x;
      f[2 * k + 1] = t.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) f[k] = k < valid ? __bfloat162float(p[k]) : 0.f;
  }
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, int64_t valid, bool vec,
                                       const float (&f)[8]) {
  if (vec && valid >= 8) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
    *reinterpret_cast<uint4*>(p) = u;
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (k < valid) p[k] = __float2bfloat16_rn(f[k]);
  }
}

// kVec raw bf16 values, two to a 32-bit word (the even element in the low half), only ever
// copied or widened exactly: the conv's ring slots, history rows and window entries
// (gdn_conv.cu), attention_prep's chunks.
template <int kVec>
struct Raw {
  uint32_t h[(kVec + 1) / 2];
};

// A whole vector from p, aligned to its size.
template <int kVec>
__device__ __forceinline__ Raw<kVec> load_raw(const __nv_bfloat16* p) {
  Raw<kVec> r;
  if constexpr (kVec == 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    r.h[0] = u.x, r.h[1] = u.y, r.h[2] = u.z, r.h[3] = u.w;
  } else if constexpr (kVec == 4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    r.h[0] = u.x, r.h[1] = u.y;
  } else if constexpr (kVec == 2) {
    r.h[0] = *reinterpret_cast<const uint32_t*>(p);
  } else {
    r.h[0] = __bfloat16_as_ushort(*p);
  }
  return r;
}

template <int kVec>
__device__ __forceinline__ void store_raw(__nv_bfloat16* p, const Raw<kVec>& r) {
  if constexpr (kVec == 8) {
    *reinterpret_cast<uint4*>(p) = make_uint4(r.h[0], r.h[1], r.h[2], r.h[3]);
  } else if constexpr (kVec == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(r.h[0], r.h[1]);
  } else if constexpr (kVec == 2) {
    *reinterpret_cast<uint32_t*>(p) = r.h[0];
  } else {
    *p = __ushort_as_bfloat16(static_cast<unsigned short>(r.h[0]));
  }
}

template <int kVec>
__device__ __forceinline__ Raw<kVec> zero_raw() {
  Raw<kVec> r;
#pragma unroll
  for (int i = 0; i < (kVec + 1) / 2; ++i) r.h[i] = 0u;
  return r;
}

// Element v widened to fp32 (exact).
template <int kVec>
__device__ __forceinline__ float raw_at(const Raw<kVec>& r, int v) {
  const uint32_t u = r.h[v / 2];
  return __uint_as_float(v % 2 == 0 ? u << 16 : u & 0xffff0000u);
}

// A chunk (the file top) as raw values: `valid` elements of the row left from p, missing ones 0.
__device__ __forceinline__ Raw<8> load_raw8(const __nv_bfloat16* p, int64_t valid, bool vec) {
  if (vec && valid >= 8) return load_raw<8>(p);
  Raw<8> r = zero_raw<8>();
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (k < valid) r.h[k / 2] |= uint32_t(__bfloat16_as_ushort(p[k])) << (16 * (k % 2));
  return r;
}

__device__ __forceinline__ void store_raw8(__nv_bfloat16* p, int64_t valid, bool vec,
                                           const Raw<8>& r) {
  if (vec && valid >= 8) return store_raw<8>(p, r);
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (k < valid)
      p[k] = __ushort_as_bfloat16(static_cast<unsigned short>(r.h[k / 2] >> (16 * (k % 2))));
}

// Two fp32 values rounded to bf16 and packed, lo in the low half (one register of a bf16 pair).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}

// The RMS norm's factor for a row whose squares sum to sum_sq: rsqrt(mean + eps), the mean an
// IEEE division, rsqrtf the hardware approximation (~2 ulp fp32, as torch.rsqrt on the GPU).
__device__ __forceinline__ float rms_scale(float sum_sq, int64_t dim, float eps) {
  // By a power of two the quotient is the product by its exact reciprocal, one instruction
  // instead of a checked division; the two differ only on a subnormal mean, which eps swamps.
  const float mean =
      (dim & (dim - 1)) == 0 ? sum_sq * (1.f / float(dim)) : __fdiv_rn(sum_sq, float(dim));
  return rsqrtf(mean + eps);
}

// Fast-math sigmoid (__expf, approximate division): relative error ~1e-6, far below the bf16
// rounding that follows it. Saturates to 0 / 1 without NaN for large |x|.
__device__ __forceinline__ float sigmoid_fast(float x) {
  return 1.f / (1.f + __expf(-x));
}

// The elementwise steps that fused kernels repeat inside their epilogues: each is written once,
// here, so that a fused path gives the bits of the unfused op it replaces.
__device__ __forceinline__ float silu_times(float g, float u) {  // silu_mul: silu(gate) * up
  return g * sigmoid_fast(g) * u;
}
__device__ __forceinline__ float times_sigmoid(float x, float g) {  // sigmoid_mul: x * sigmoid(g)
  return x * sigmoid_fast(g);
}
// gated_rmsnorm's value: w * (o * s) * silu(z), s the row's rms_scale.
__device__ __forceinline__ float gated_rms(float w, float o, float s, float z) {
  return w * (o * s) * (z * sigmoid_fast(z));
}

// Butterfly sum over aligned groups of `width` lanes (a power of two <= 32), offsets from
// width / 2 down to 1. Partners add the same two values in swapped order, so every lane ends with
// the bitwise-same sum. All 32 lanes of the warp must call it. Unrolled over every offset a warp
// has, each step predicated on the (uniform) width: no loop for a width known only at run time.
__device__ __forceinline__ float group_sum_lanes(float s, int width) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    if (off < width) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// Each of kRows rows' sum of squares (its kVec values in order, fp32) summed over aligned groups
// of `width` lanes, the rows' shuffles interleaved (each row's sum in the order group_sum_lanes
// gives it alone): one row's butterfly alone leaves the warp waiting on each step. All 32 lanes
// call it.
template <int kRows, int kVec>
__device__ __forceinline__ void group_sum_sq_rows(const Raw<kVec> (&rows)[kRows], int width,
                                                  float (&sum_sq)[kRows]) {
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    sum_sq[q] = 0.f;
#pragma unroll
    for (int v = 0; v < kVec; ++v)
      sum_sq[q] = fmaf(raw_at(rows[q], v), raw_at(rows[q], v), sum_sq[q]);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    if (off < width) {
#pragma unroll
      for (int q = 0; q < kRows; ++q) sum_sq[q] += __shfl_xor_sync(0xffffffffu, sum_sq[q], off);
    }
}

}  // namespace flide::kernels::detail
