// What the standalone CUDA diagnostics in bench/ (gemm_algos.cu, swiglu_gemm.cu) share: status
// checks, random bf16 inputs, a cuBLASLt GEMM laid out as gemm.cpp lays it out, and the two ways
// of timing a kernel (bursts at full clock, or held at the GPU's power limit). Each diagnostic is
// one translation unit built by one nvcc line, so everything here is inline.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace flide::bench {

inline bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}
inline bool ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    std::fprintf(stderr, "%s: %s\n", what, cublasLtGetStatusString(s));
  return s == CUBLAS_STATUS_SUCCESS;
}

// Uniform bf16 values in [-scale, scale) from a hash of the index and the seed (no zeros: they
// run faster).
__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16((float(h & 0xffff) / 65536.f - 0.5f) * (2.f * scale));
  }
}

constexpr size_t kWorkspace = size_t(32) << 20;

// out [M, N] = x [M, K] . w [N, K]^T (+ out with beta 1), bf16 in and out, fp32 compute: gemm.cpp's
// layout, with the first `count` algorithms cuBLASLt's heuristic offers.
struct LtGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;

  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }

  bool make(cublasLtHandle_t lt, int m, int n, int k, int count) {
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const uint64_t ws = kWorkspace;
    cublasLtMatmulPreference_t pref = nullptr;
    algos.resize(size_t(count));
    int found = 0;
    const bool made =
        ok(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc") &&
        ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
           "transa") &&
        ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
           "transb") &&
        ok(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k), "A") &&
        ok(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, m, k), "B") &&
        ok(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, n, m, n), "C") &&
        ok(cublasLtMatmulPreferenceCreate(&pref), "preference") &&
        ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof ws),
           "workspace preference") &&
        ok(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, count, algos.data(), &found),
           "heuristic") &&
        found > 0;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    algos.resize(size_t(made ? found : 0));
    return made;
  }

  cublasStatus_t run(cublasLtHandle_t lt, size_t algo, const void* x, const void* w, void* out,
                     float beta, void* workspace) const {
    const float alpha = 1.f;
    return cublasLtMatmul(lt, desc, &alpha, w, a, x, b, &beta, out, c, out, c, &algos[algo].algo,
                          workspace, kWorkspace, nullptr);
  }
};

// Milliseconds a run of `run`, after 3 untimed runs: the best of 3 timings of 20 back-to-back
// runs (bursts, at full clock), or with sustain_s > 0 runs back to back for that many seconds
// with the second half timed: a GPU held at its power limit, as a loaded server is, lowers its
// clock until the watts fit, and there a kernel's time follows the energy it spends.
class Timer {
 public:
  Timer() {
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~Timer() {
    cudaEventDestroy(stop_);
    cudaEventDestroy(start_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  template <class Run>
  double ms_per_run(Run&& run, double sustain_s) {
    for (int r = 0; r < 3; ++r) run();
    if (sustain_s <= 0) {
      double best = 1e30;
      for (int t = 0; t < 3; ++t) best = std::min(best, batch_ms(run) / kRuns);
      return best;
    }
    using Clock = std::chrono::steady_clock;
    const Clock::time_point t0 = Clock::now();
    double timed_ms = 0;
    long timed_runs = 0;
    for (double elapsed = 0; elapsed < sustain_s;
         elapsed = std::chrono::duration<double>(Clock::now() - t0).count()) {
      const double ms = batch_ms(run);
      if (elapsed >= sustain_s / 2) timed_ms += ms, timed_runs += kRuns;
    }
    return timed_runs > 0 ? timed_ms / double(timed_runs) : 0.0;
  }

 private:
  static constexpr int kRuns = 20;
  template <class Run>
  double batch_ms(Run& run) {  // kRuns back-to-back runs
    cudaEventRecord(start_);
    for (int r = 0; r < kRuns; ++r) run();
    cudaEventRecord(stop_);
    cudaEventSynchronize(stop_);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return double(ms);
  }
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace flide::bench
