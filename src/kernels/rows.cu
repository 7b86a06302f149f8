// Row and column copies: embedding lookup, gathering out rows and splitting the per-head
// [query | gate] halves. All three are one strided row copy, out row r = bytes [0, n) of source
// row src_rows ? src_rows[r] : r, done as raw bytes in the widest unit (16, 8, 4, 2 or 1 bytes)
// that divides every address, stride and length involved, so that awkward widths (head_dim 12,
// 24 or 40) still copy with the widest access their layout allows.
#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"

namespace flide::kernels {
namespace {

struct CopyJob {
  const char* src;  // row 0 of the source, at the copied columns
  char* dst;
};

// A row belongs to `group` consecutive threads (a power of two <= blockDim) striding its units.
// blockIdx.y picks the job, so split_query_gate copies both halves in one launch.
template <class U>
__global__ void copy_rows_kernel(CopyJob job0, CopyJob job1, const int32_t* src_rows, int64_t rows,
                                 int64_t src_stride, int64_t dst_stride, int64_t units, int group) {
  const char* src = blockIdx.y == 0 ? job0.src : job1.src;
  char* dst = blockIdx.y == 0 ? job0.dst : job1.dst;
  const int lane = int(threadIdx.x) % group;
  const int rows_per_block = int(blockDim.x) / group;
  for (int64_t r = int64_t(blockIdx.x) * rows_per_block + int(threadIdx.x) / group; r < rows;
       r += int64_t(gridDim.x) * rows_per_block) {
    const int64_t sr = src_rows ? int64_t(src_rows[r]) : r;
    const U* s = reinterpret_cast<const U*>(src + sr * src_stride);
    U* d = reinterpret_cast<U*>(dst + r * dst_stride);
    for (int64_t u = lane; u < units; u += group) d[u] = s[u];
  }
}

template <class U>
void launch_copy(const CopyJob* jobs, int n_jobs, const int32_t* src_rows, int64_t rows,
                 int64_t src_stride, int64_t dst_stride, int64_t bytes, cudaStream_t stream) {
  const int64_t units = bytes / int64_t(sizeof(U));
  constexpr int threads = 256;
  int group = 1;
  while (group < threads && group < units) group *= 2;
  const dim3 grid(detail::blocks_for(rows, threads / group), n_jobs);
  copy_rows_kernel<U><<<grid, threads, 0, stream>>>(jobs[0], jobs[n_jobs - 1], src_rows, rows,
                                                    src_stride, dst_stride, units, group);
}

// Strides and row length in bytes.
cudaError_t copy_rows(const CopyJob* jobs, int n_jobs, const int32_t* src_rows, int64_t rows,
                      int64_t src_stride, int64_t dst_stride, int64_t bytes, cudaStream_t stream) {
  if (rows <= 0 || bytes <= 0) return cudaSuccess;
  uint64_t bits = uint64_t(src_stride) | uint64_t(dst_stride) | uint64_t(bytes);
  for (int j = 0; j < n_jobs; ++j)
    bits |= reinterpret_cast<uintptr_t>(jobs[j].src) | reinterpret_cast<uintptr_t>(jobs[j].dst);
  if (bits % 16 == 0) {
    launch_copy<uint4>(jobs, n_jobs, src_rows, rows, src_stride, dst_stride, bytes, stream);
  } else if (bits % 8 == 0) {
    launch_copy<uint2>(jobs, n_jobs, src_rows, rows, src_stride, dst_stride, bytes, stream);
  } else if (bits % 4 == 0) {
    launch_copy<uint32_t>(jobs, n_jobs, src_rows, rows, src_stride, dst_stride, bytes, stream);
  } else if (bits % 2 == 0) {
    launch_copy<uint16_t>(jobs, n_jobs, src_rows, rows, src_stride, dst_stride, bytes, stream);
  } else {
    launch_copy<uint8_t>(jobs, n_jobs, src_rows, rows, src_stride, dst_stride, bytes, stream);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t embed(const int32_t* ids, const bf16* table, bf16* out, int64_t T, int64_t H,
                  cudaStream_t stream) {
  const int64_t row_bytes = H * int64_t(sizeof(bf16));
  const CopyJob job{reinterpret_cast<const char*>(table), reinterpret_cast<char*>(out)};
  return copy_rows(&job, 1, ids, T, row_bytes, row_bytes, row_bytes, stream);
}

cudaError_t gather_rows(const void* x, const int32_t* rows, void* out, int64_t R, int64_t cols,
                        int elem_bytes, cudaStream_t stream) {
  if (elem_bytes != 2 && elem_bytes != 4) return cudaErrorInvalidValue;
  const int64_t row_bytes = cols * elem_bytes;
  const CopyJob job{static_cast<const char*>(x), static_cast<char*>(out)};
  return copy_rows(&job, 1, rows, R, row_bytes, row_bytes, row_bytes, stream);
}

// Viewed as [rows * heads, 2 * head_dim] -> two [rows * heads, head_dim] column slices.
cudaError_t split_query_gate(const bf16* qg, bf16* q, bf16* gate, int64_t rows, int heads,
                             int head_dim, cudaStream_t stream) {
  constexpr int64_t e = sizeof(bf16);
  const int64_t hd = head_dim;
  const CopyJob jobs[2] = {
      {reinterpret_cast<const char*>(qg), reinterpret_cast<char*>(q)},
      {reinterpret_cast<const char*>(qg + hd), reinterpret_cast<char*>(gate)},
  };
  return copy_rows(jobs, 2, nullptr, rows * heads, 2 * hd * e, hd * e, hd * e, stream);
}

}  // namespace flide::kernels
