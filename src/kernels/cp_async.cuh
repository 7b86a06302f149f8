// Asynchronous global -> shared copies (cp.async, sm_80+), shared by the kernels that stage
// their inputs: attention (tiles of K and V), the chunked delta rule (chunk tiles), the GDN conv
// (each thread's private ring of input rows). A thread's copies are grouped by commit and waited
// for by count, so a thread that reads only what it copied itself needs no barrier.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace flide::kernels::detail {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// kBytes (4, 8 or 16) from gmem to smem; 16-byte copies bypass L1 (.cg), the others cannot.
template <int kBytes>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const uint32_t s = smem_u32(smem);
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(kBytes)
                 : "memory");
}

// 16 bytes global -> shared; src_bytes 0 writes zeros (src must still be a valid address).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace flide::kernels::detail
