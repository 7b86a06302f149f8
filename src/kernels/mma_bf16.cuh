// bf16 tensor-core fragments for mma.sync, shared by tree attention (attention.cu,
// attention_wgmma.cu) and the chunked delta rule (gdn_*.cu): ldmatrix loads, the m16n8k16
// product, and accumulator tiles turned into A fragments.
//
// Layouts (PTX ISA), lane = 4 g + t. ldmatrix: matrix m's row r is at the address lane 8 m + r
// gives; lane 4 g + t receives row g's pair (2t, 2t + 1), or with .trans column g's pair (rows
// 2t, 2t + 1). m16n8k16: A (16x16) rows g, g + 8 with k pairs (2t, 2t + 1), (2t + 8, 2t + 9); B
// the same k pairs of column g; C (16x8) c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8,
// 2t + 1). So two n8 accumulator tiles side by side are an A fragment as they stand.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/bf16x8.cuh"
#include "kernels/cp_async.cuh"

namespace flide::kernels::detail {

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  ldsm_x4(r, smem_u32(p));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const void* p) {
  ldsm_x2(r, smem_u32(p));
}

// Four 8x8 b16 matrices stored as they are: register m holds lane 4 g + t's pair (2t, 2t + 1) of
// row g of matrix m (an mma accumulator's layout); lane 8 m + r gives the address of row r of
// matrix m.
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// Four 8x8 b16 matrices stored transposed: register m holds lane 4 g + t's pair (2t, 2t + 1) of
// row g of matrix m, which lands in column g of rows 2t, 2t + 1; lane 8 m + r gives the address
// of stored row r of matrix m.
__device__ __forceinline__ void stsm_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

// c[16x8] += a[16x16] b[16x8] (b0, b1: B's two registers), fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The A fragment of two accumulator tiles side by side (tile 0's 8 columns as k 0-7, tile 1's as
// k 8-15), rounded to bf16.
__device__ __forceinline__ void acc_pair_as_a(uint32_t (&a)[4], const float (&c0)[4],
                                              const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

}  // namespace flide::kernels::detail
