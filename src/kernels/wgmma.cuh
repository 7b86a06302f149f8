// Hopper warpgroup MMA (wgmma, sm_90a) for bf16 (and, for the GEMMs, FP8 e4m3) operands with fp32
// accumulators: shared-memory matrix descriptors for the 128-byte-swizzled layout (the layout
// TMA's 128-byte swizzle writes for 64-column boxes), m64n64k16 with A from shared memory or from
// registers, m64n80k16 and m64n128k16 (and m64n128k32 e4m3) from shared memory, and m64n256k16
// with A from registers. A warpgroup is 4 consecutive warps; all 128 threads issue each call.
//
// Layout (both operands, and both "K-major" and "MN-major" reads of it): a tile is cut into
// column chunks of 64 bf16 (128 bytes); chunk c holds rows 0.. of its 64 columns, 128 bytes per
// row, and the 16-byte unit u of row r sits at unit u ^ (r % 8) (Swizzle<3,4,3>: address bits
// 4-6 ^= bits 7-9). Tiles and chunks start 1024-byte aligned, so the XOR the hardware applies to
// absolute addresses is the one the stores applied. Descriptors (PTX ISA, "matrix descriptor"):
//   K-major (k contiguous):  8-row groups SBO = 1024 bytes apart; a k16 step inside a chunk is a
//                            start-address offset of 32 bytes; LBO unused.
//   MN-major (n contiguous): 8-row (k) groups SBO = 1024 bytes apart, 64-column atoms LBO apart.
#pragma once

#include <cstdint>

namespace flide::kernels::wgmma {

// Shared-memory byte address of element (r, c) (c a multiple of 8) of a swizzled tile of `rows`
// rows starting at `tile`.
__device__ __forceinline__ uint32_t swizzled(uint32_t tile, int rows, int r, int c) {
  return tile + uint32_t(c >> 6) * uint32_t(rows) * 128u + uint32_t(r) * 128u +
         (uint32_t(((c >> 3) & 7) ^ (r & 7)) << 4);
}

__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3ffffu) >> 4) | uint64_t((lbo >> 4) & 0x3fffu) << 16 |
         uint64_t((sbo >> 4) & 0x3fffu) << 32 | uint64_t(1) << 62;  // 1: 128-byte swizzle
}

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to wgmma's reads.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The accumulator operands of m64nNk16, d[0..N/8)[0..4), and their asm register numbers, each
// width built on the one below.
#define FLIDE_WGMMA_D32(c)                                                                        \
  c(d[0][0]), c(d[0][1]), c(d[0][2]), c(d[0][3]), c(d[1][0]), c(d[1][1]), c(d[1][2]), c(d[1][3]), \
      c(d[2][0]), c(d[2][1]), c(d[2][2]), c(d[2][3]), c(d[3][0]), c(d[3][1]), c(d[3][2]),         \
      c(d[3][3]), c(d[4][0]), c(d[4][1]), c(d[4][2]), c(d[4][3]), c(d[5][0]), c(d[5][1]),         \
      c(d[5][2]), c(d[5][3]), c(d[6][0]), c(d[6][1]), c(d[6][2]), c(d[6][3]), c(d[7][0]),         \
      c(d[7][1]), c(d[7][2]), c(d[7][3])
#define FLIDE_WGMMA_D64(c)                                                                       \
  FLIDE_WGMMA_D32(c), c(d[8][0]), c(d[8][1]), c(d[8][2]), c(d[8][3]), c(d[9][0]), c(d[9][1]),    \
      c(d[9][2]), c(d[9][3]), c(d[10][0]), c(d[10][1]), c(d[10][2]), c(d[10][3]), c(d[11][0]),   \
      c(d[11][1]), c(d[11][2]), c(d[11][3]), c(d[12][0]), c(d[12][1]), c(d[12][2]), c(d[12][3]), \
      c(d[13][0]), c(d[13][1]), c(d[13][2]), c(d[13][3]), c(d[14][0]), c(d[14][1]), c(d[14][2]), \
      c(d[14][3]), c(d[15][0]), c(d[15][1]), c(d[15][2]), c(d[15][3])
#define FLIDE_WGMMA_D128(c)                                                                      \
  FLIDE_WGMMA_D64(c), c(d[16][0]), c(d[16][1]), c(d[16][2]), c(d[16][3]), c(d[17][0]),           \
      c(d[17][1]), c(d[17][2]), c(d[17][3]), c(d[18][0]), c(d[18][1]), c(d[18][2]), c(d[18][3]), \
      c(d[19][0]), c(d[19][1]), c(d[19][2]), c(d[19][3]), c(d[20][0]), c(d[20][1]), c(d[20][2]), \
      c(d[20][3]), c(d[21][0]), c(d[21][1]), c(d[21][2]), c(d[21][3]), c(d[22][0]), c(d[22][1]), \
      c(d[22][2]), c(d[22][3]), c(d[23][0]), c(d[23][1]), c(d[23][2]), c(d[23][3]), c(d[24][0]), \
      c(d[24][1]), c(d[24][2]), c(d[24][3]), c(d[25][0]), c(d[25][1]), c(d[25][2]), c(d[25][3]), \
      c(d[26][0]), c(d[26][1]), c(d[26][2]), c(d[26][3]), c(d[27][0]), c(d[27][1]), c(d[27][2]), \
      c(d[27][3]), c(d[28][0]), c(d[28][1]), c(d[28][2]), c(d[28][3]), c(d[29][0]), c(d[29][1]), \
      c(d[29][2]), c(d[29][3]), c(d[30][0]), c(d[30][1]), c(d[30][2]), c(d[30][3]), c(d[31][0]), \
      c(d[31][1]), c(d[31][2]), c(d[31][3])
#define FLIDE_WGMMA_R32                                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FLIDE_WGMMA_R64                                                                     \
  FLIDE_WGMMA_R32                                                                           \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, " \
  "%49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define FLIDE_WGMMA_R128                                                                       \
  FLIDE_WGMMA_R64                                                                              \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "    \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, " \
  "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "  \
  "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define FLIDE_WGMMA_D32_LIST "{" FLIDE_WGMMA_R32 "}"

// (scale-d is a predicate: 1 accumulates into d.)
// d[64 x 64] = A[64 x 16] B[16 x 64] (+ d when kAccumulate), both operands from shared memory,
// both K-major. d: the warp's 16 rows in m16n8 accumulator layout, n-tile i = d[i]. A product's
// first k-step (kAccumulate = false) writes d without reading it, so no instruction has to zero
// d first: the compiler may place such instructions while another wgmma is in flight, and ptxas
// then serializes every wgmma.
template <bool kAccumulate>
__device__ __forceinline__ void mma_ss(float (&d)[8][4], uint64_t a, uint64_t b) {
#define FLIDE_WGMMA_SS                                                         \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                 \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLIDE_WGMMA_D32_LIST \
  ", %32, %33, p, 1, 1, 0, 0;\n}\n"
  if constexpr (kAccumulate)
    asm volatile(FLIDE_WGMMA_SS : FLIDE_WGMMA_D32("+f") : "l"(a), "l"(b), "r"(1));
  else  // d written only: "=f"
    asm volatile(FLIDE_WGMMA_SS : FLIDE_WGMMA_D32("=f") : "l"(a), "l"(b), "r"(0));
#undef FLIDE_WGMMA_SS
}
// d[64 x 80] = A[64 x 16] B[16 x 80] (+ d when kAccumulate), both operands from shared memory,
// both K-major: the hd-256 attention's S over a block of 80 keys. Written like mma_ss.
template <bool kAccumulate>
__device__ __forceinline__ void mma_ss_n80(float (&d)[10][4], uint64_t a, uint64_t b) {
#define FLIDE_WGMMA_D40(c)                                                                    \
  FLIDE_WGMMA_D32(c), c(d[8][0]), c(d[8][1]), c(d[8][2]), c(d[8][3]), c(d[9][0]), c(d[9][1]), \
      c(d[9][2]), c(d[9][3])
#define FLIDE_WGMMA_SS80                                                   \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"                             \
  "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {" FLIDE_WGMMA_R32 \
  ", %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, p, 1, 1, 0, 0;\n}\n"
  if constexpr (kAccumulate)
    asm volatile(FLIDE_WGMMA_SS80 : FLIDE_WGMMA_D40("+f") : "l"(a), "l"(b), "r"(1));
  else  // d written only: "=f"
    asm volatile(FLIDE_WGMMA_SS80 : FLIDE_WGMMA_D40("=f") : "l"(a), "l"(b), "r"(0));
#undef FLIDE_WGMMA_SS80
#undef FLIDE_WGMMA_D40
}
// d[64 x 64] = A[64 x 16] B[16 x 64] (+ d when accumulate), A from registers (the warp's 16 rows
// as an m16n8k16 A fragment), B from shared memory, K-major or, with kBTransposed, MN-major.
template <bool kBTransposed>
__device__ __forceinline__ void mma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b,
                                       bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " FLIDE_WGMMA_D32_LIST
      ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : FLIDE_WGMMA_D32("+f")
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)),
        "n"(int(kBTransposed)));
}
// d[64 x 128] = A[64 x 16] B[16 x 128] (+ d when accumulate), both operands from shared memory,
// both K-major: the GEMM's step (swiglu_gemm.cu). d: the warp's 16 rows, n-tile i = d[i].
__device__ __forceinline__ void mma_ss_n128(float (&d)[16][4], uint64_t a, uint64_t b,
                                            bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" FLIDE_WGMMA_R64
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : FLIDE_WGMMA_D64("+f")
      : "l"(a), "l"(b), "r"(int(accumulate)));
}
// d[64 x 128] = A[64 x 32] B[32 x 128] (+ d when accumulate) in FP8 e4m3, both operands from
// shared memory, K-major: mma_ss_n128's step for the FP8 products (tma_gemm.cuh). A k32 step of
// e4m3 is 32 bytes, as a k16 step of bf16 is, so the descriptors advance as they do for bf16. (FP8
// operands have no transpose: both must be K-major.)
__device__ __forceinline__ void mma_ss_n128_e4m3(float (&d)[16][4], uint64_t a, uint64_t b,
                                                 bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" FLIDE_WGMMA_R64
      "}, %64, %65, p, 1, 1;\n}\n"
      : FLIDE_WGMMA_D64("+f")
      : "l"(a), "l"(b), "r"(int(accumulate)));
}
// d[64 x 256] = A[64 x 16] B[16 x 256] (+ d when accumulate), A from registers (an m16n8k16 A
// fragment, as mma_rs), B from shared memory MN-major: four 64-column atoms LBO apart. The hd-256
// attention's O += P V in one instruction a k-step instead of four. d: n-tile i = d[i].
__device__ __forceinline__ void mma_rs_n256_t(float (&d)[32][4], const uint32_t (&a)[4], uint64_t b,
                                              bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" FLIDE_WGMMA_R128
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : FLIDE_WGMMA_D128("+f")
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
}
#undef FLIDE_WGMMA_D32
#undef FLIDE_WGMMA_D64
#undef FLIDE_WGMMA_D128
#undef FLIDE_WGMMA_R32
#undef FLIDE_WGMMA_R64
#undef FLIDE_WGMMA_R128
#undef FLIDE_WGMMA_D32_LIST

}  // namespace flide::kernels::wgmma
