// The fused gate/up/SwiGLU GEMM (src/kernels/swiglu_gemm.cu) against the unfused path flide ran
// before it (cuBLASLt's heuristic algorithm for the gate and the up products, then silu_mul), on
// the 0.8B model's MLP shape (N = 3584, K = 1024; --n, --k for others):
//   1. agreement: the share of outputs bitwise equal between the two paths, and each path's
//      worst error against a float64 CPU reference on 64 sampled rows (relative to the row's
//      largest output), on fresh random inputs, outputs poisoned first;
//   2. time: each path's best of 3 timings of 20 back-to-back runs (bursts, full clock), then,
//      with --sustain S, each path back to back for S seconds with the second half timed (a GPU
//      held at its power limit, as a loaded server is).
// A diagnostic, not part of the build:
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O2 --use_fast_math -Isrc \
//     bench/swiglu_gemm.cu src/kernels/swiglu_gemm.cu src/kernels/elementwise.cu -lcublasLt \
//     -o /tmp/swiglu_gemm
//   /tmp/swiglu_gemm [--sustain S] [--n N] [--k K] [M ...]   (default M: 72 6260 25040 50080,
//                                      the last layer's read rows and rounds of 1, 4, 8 requests)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_cuda.cuh"
#include "kernels/dense.h"

using flide::bench::ok;
using flide::kernels::bf16;

int main(int argc, char** argv) {
  std::vector<int> rows;
  double sustain_s = 0;
  int N = 3584, K = 1024;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sustain") == 0 && i + 1 < argc)
      sustain_s = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      N = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--k") == 0 && i + 1 < argc)
      K = std::atoi(argv[++i]);
    else
      rows.push_back(std::atoi(argv[i]));
  }
  if (rows.empty()) rows = {72, 6260, 25040, 50080};
  const size_t max_m = size_t(*std::max_element(rows.begin(), rows.end()));
  cublasLtHandle_t lt = nullptr;
  bf16 *x = nullptr, *wg = nullptr, *wu = nullptr, *gate = nullptr, *up = nullptr, *ref = nullptr,
       *fused = nullptr;
  void* workspace = nullptr;
  if (!ok(cublasLtCreate(&lt), "cublasLtCreate") ||
      !ok(cudaMalloc(&x, max_m * K * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&wg, size_t(N) * K * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&wu, size_t(N) * K * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&gate, max_m * N * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&up, max_m * N * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&ref, max_m * N * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&fused, max_m * N * 2), "cudaMalloc") ||
      !ok(cudaMalloc(&workspace, flide::bench::kWorkspace), "cudaMalloc"))
    return 1;
  const float w_scale = 1.f / std::sqrt(float(K));  // gate and up of order 1: silu's curved part
  flide::bench::fill<<<1024, 256>>>(x, max_m * K, 11, 1.f);
  flide::bench::fill<<<1024, 256>>>(wg, size_t(N) * K, 12, 1.7f * w_scale);
  flide::bench::fill<<<1024, 256>>>(wu, size_t(N) * K, 13, 1.7f * w_scale);
  flide::bench::Timer timer;

  if (!flide::kernels::swiglu_gemm_supported(x, wg, wu, fused, N, K)) {
    std::printf("N %d K %d: the fused kernel does not take this shape (swiglu_gemm_supported)\n", N,
                K);
    return 1;
  }
  bool all_ok = true;
  for (const int m : rows) {
    flide::bench::LtGemm plan;  // the heuristic's first algorithm, as gemm.cpp runs
    if (!plan.make(lt, m, N, K, 1)) return 1;
    auto unfused = [&] {
      plan.run(lt, 0, x, wg, gate, 0.f, workspace);
      plan.run(lt, 0, x, wu, up, 0.f, workspace);
      flide::kernels::silu_mul(gate, up, ref, int64_t(m) * N, nullptr);
    };
    auto fuse = [&] { flide::kernels::swiglu_gemm(x, wg, wu, fused, m, N, K, nullptr); };

    // 1. Agreement, outputs poisoned (0xffff: NaN) first.
    cudaMemset(ref, 0xff, size_t(m) * N * 2);
    cudaMemset(fused, 0xff, size_t(m) * N * 2);
    unfused();
    if (!ok(flide::kernels::swiglu_gemm(x, wg, wu, fused, m, N, K, nullptr), "swiglu_gemm") ||
        !ok(cudaDeviceSynchronize(), "first runs"))
      return 1;
    std::vector<bf16> hr(size_t(m) * N), hf(size_t(m) * N), hx(size_t(m) * K), hg(size_t(N) * K),
        hu(size_t(N) * K);
    cudaMemcpy(hr.data(), ref, hr.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hf.data(), fused, hf.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hx.data(), x, hx.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hg.data(), wg, hg.size() * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(hu.data(), wu, hu.size() * 2, cudaMemcpyDeviceToHost);
    size_t equal = 0, nonfinite = 0;
    for (size_t i = 0; i < hr.size(); ++i) {
      equal += std::memcmp(&hr[i], &hf[i], 2) == 0;
      nonfinite += !std::isfinite(__bfloat162float(hf[i]));
    }
    double err_fused = 0, err_unfused = 0;
    for (int s = 0; s < 64; ++s) {
      const int r = int((uint64_t(s) * 2654435761u + 7) % uint64_t(m));
      std::vector<double> y(N);
      double peak = 0;
      for (int n = 0; n < N; ++n) {
        double a = 0, b = 0;
        for (int k = 0; k < K; ++k) {
          const double xv = __bfloat162float(hx[size_t(r) * K + k]);
          a += xv * __bfloat162float(hg[size_t(n) * K + k]);
          b += xv * __bfloat162float(hu[size_t(n) * K + k]);
        }
        y[n] = a / (1 + std::exp(-a)) * b;
        peak = std::max(peak, std::fabs(y[n]));
      }
      for (int n = 0; n < N; ++n) {
        err_fused =
            std::max(err_fused, std::fabs(__bfloat162float(hf[size_t(r) * N + n]) - y[n]) / peak);
        err_unfused =
            std::max(err_unfused, std::fabs(__bfloat162float(hr[size_t(r) * N + n]) - y[n]) / peak);
      }
    }
    // Three bf16 roundings (gate, up, the product), each 2^-9 of its value, with silu's slope on
    // the gate's and |gate| |up| reaching past the row's largest output: 7-9e-3 of the row's peak
    // measured for both paths. The fused path may not be worse than the unfused one by more than a
    // quarter, nor than 1.2e-2.
    const bool good = nonfinite == 0 && err_fused < 1.2e-2 && err_fused <= 1.25 * err_unfused;
    all_ok = all_ok && good;
    std::printf(
        "M %d N %d K %d: bitwise equal %.4f, non-finite %zu, max error vs float64 (of row peak): "
        "fused %.3e unfused %.3e %s\n",
        m, N, K, double(equal) / double(hr.size()), nonfinite, err_fused, err_unfused,
        good ? "ok" : "FAIL");

    // 2. Time.
    const double flop = 4.0 * m * N * K;
    auto report = [&](const char* how, double u, double f) {
      std::printf(
          "  %-10s unfused %8.1f us (%5.1f TFLOP/s)  fused %8.1f us (%5.1f TFLOP/s)  %+.1f%%\n",
          how, u * 1e3, flop / u / 1e9, f * 1e3, flop / f / 1e9, (f / u - 1) * 100);
    };
    report("burst:", timer.ms_per_run(unfused, 0), timer.ms_per_run(fuse, 0));
    if (sustain_s > 0)
      report("sustained:", timer.ms_per_run(unfused, sustain_s), timer.ms_per_run(fuse, sustain_s));
    std::fflush(stdout);
  }
  if (!ok(cudaGetLastError(), "run")) return 1;
  return all_ok ? 0 : 1;
}
