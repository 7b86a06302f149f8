// Row copies: embedding lookup and gathering out rows. Both are one row copy, out row r = source
// row src_rows ? src_rows[r] : r, done as raw bytes in the widest unit (16, 8, 4, 2 or 1 bytes)
// that divides every address and row length involved, so that awkward widths still copy with the
// widest access their layout allows. And zeroing a padded round's rows that belong to no node.
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"

namespace flide::kernels {
namespace {

// A row belongs to `group` consecutive threads (a power of two <= blockDim) striding its units.
template <class U>
__global__ void copy_rows_kernel(const char* src, char* dst, const int32_t* src_rows, int64_t rows,
                                 int64_t units, int group) {
  const int64_t row_bytes = units * int64_t(sizeof(U));
  const int lane = int(threadIdx.x) % group;
  const int rows_per_block = int(blockDim.x) / group;
  for (int64_t r = int64_t(blockIdx.x) * rows_per_block + int(threadIdx.x) / group; r < rows;
       r += int64_t(gridDim.x) * rows_per_block) {
    const int64_t sr = src_rows ? int64_t(src_rows[r]) : r;
    const U* s = reinterpret_cast<const U*>(src + sr * row_bytes);
    U* d = reinterpret_cast<U*>(dst + r * row_bytes);
    for (int64_t u = lane; u < units; u += group) d[u] = s[u];
  }
}

template <class U>
void launch_copy(const void* src, void* dst, const int32_t* src_rows, int64_t rows, int64_t bytes,
                 cudaStream_t stream) {
  const int64_t units = bytes / int64_t(sizeof(U));
  constexpr int threads = 256;
  int group = 1;
  while (group < threads && group < units) group *= 2;
  copy_rows_kernel<U><<<detail::blocks_for(rows, threads / group), threads, 0, stream>>>(
      static_cast<const char*>(src), static_cast<char*>(dst), src_rows, rows, units, group);
}

// Rows of `bytes` bytes, packed on both sides.
cudaError_t copy_rows(const void* src, void* dst, const int32_t* src_rows, int64_t rows,
                      int64_t bytes, cudaStream_t stream) {
  if (rows <= 0 || bytes <= 0) return cudaSuccess;
  const uint64_t bits =
      uint64_t(bytes) | reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
  if (bits % 16 == 0) {
    launch_copy<uint4>(src, dst, src_rows, rows, bytes, stream);
  } else if (bits % 8 == 0) {
    launch_copy<uint2>(src, dst, src_rows, rows, bytes, stream);
  } else if (bits % 4 == 0) {
    launch_copy<uint32_t>(src, dst, src_rows, rows, bytes, stream);
  } else if (bits % 2 == 0) {
    launch_copy<uint16_t>(src, dst, src_rows, rows, bytes, stream);
  } else {
    launch_copy<uint8_t>(src, dst, src_rows, rows, bytes, stream);
  }
  return cudaGetLastError();
}

// A warp takes 32 rows: each lane loads one row's node, and the warp zeroes the rows of none
// (a padded round's tail) together, so that a real row costs one load.
template <class U>
__global__ void zero_rows_of_no_node_kernel(char* x, int64_t rows, int64_t units,
                                            const int32_t* token_node) {
  const int warps = int(blockDim.x) / 32, lane = int(threadIdx.x) % 32;
  for (int64_t r0 = (int64_t(blockIdx.x) * warps + int(threadIdx.x) / 32) * 32; r0 < rows;
       r0 += int64_t(gridDim.x) * warps * 32) {
    const bool none = r0 + lane < rows && token_node[r0 + lane] < 0;
    for (uint32_t pad = __ballot_sync(0xffffffffu, none); pad != 0; pad &= pad - 1) {
      U* row = reinterpret_cast<U*>(x) + (r0 + __ffs(int(pad)) - 1) * units;
      for (int64_t u = lane; u < units; u += 32) row[u] = U{};
    }
  }
}

template <class U>
cudaError_t launch_zero(void* x, int64_t rows, int64_t bytes, const int32_t* token_node,
                        cudaStream_t stream) {
  constexpr int threads = 256;
  zero_rows_of_no_node_kernel<U><<<detail::blocks_for(rows, threads), threads, 0, stream>>>(
      static_cast<char*>(x), rows, bytes / int64_t(sizeof(U)), token_node);
  return cudaGetLastError();
}

}  // namespace

cudaError_t zero_rows_of_no_node(bf16* x, int64_t rows, int64_t cols, const int32_t* token_node,
                                 cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (!token_node) return cudaErrorInvalidValue;
  const int64_t bytes = cols * int64_t(sizeof(bf16));
  if ((uint64_t(bytes) | reinterpret_cast<uintptr_t>(x)) % 16 == 0)
    return launch_zero<uint4>(x, rows, bytes, token_node, stream);
  return launch_zero<uint16_t>(x, rows, bytes, token_node, stream);
}

cudaError_t embed(const int32_t* ids, const bf16* table, bf16* out, int64_t T, int64_t H,
                  cudaStream_t stream) {
  return copy_rows(table, out, ids, T, H * int64_t(sizeof(bf16)), stream);
}

cudaError_t gather_rows(const void* x, const int32_t* rows, void* out, int64_t R, int64_t cols,
                        int elem_bytes, cudaStream_t stream) {
  if (elem_bytes != 2 && elem_bytes != 4) return cudaErrorInvalidValue;
  return copy_rows(x, out, rows, R, cols * elem_bytes, stream);
}

}  // namespace flide::kernels
