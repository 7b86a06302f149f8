// Host-side launch helpers shared by the kernel launchers: the device's SM count (grids sized by
// it) and the dynamic shared-memory limit of kernels that need more than the default 48 KB.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace flide::kernels::detail {

// The current device's SM count, for launchers that size their grids by it.
inline cudaError_t multiprocessors(int& sms) {
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  return err != cudaSuccess ? err
                            : cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
}

// Raises kKernel's dynamic shared-memory limit to kBytes on the current device, once per device:
// the attribute belongs to a device's context (one CudaOps per device may share the process),
// and setting it is not an allocation, so it is allowed during graph capture too.
template <auto kKernel, int kBytes>
cudaError_t raise_smem_limit() {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> done[kMaxDevices];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool tracked = device >= 0 && device < kMaxDevices;
  if (tracked && done[device].load(std::memory_order_acquire)) return cudaSuccess;
  err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (err == cudaSuccess && tracked) done[device].store(true, std::memory_order_release);
  return err;
}

}  // namespace flide::kernels::detail
