// Times every algorithm cuBLASLt's heuristic offers (its first 8) for the 0.8B model's GEMM
// shapes, laid out as gemm.cpp lays them out (bf16 in and out, fp32 compute, w [N, K] transposed,
// x [M, K]; the residual-add shapes with beta = 1), to see how far the heuristic's first choice,
// which flide runs, is from the fastest. Each algorithm: 3 untimed runs, then the best of 3
// timings of 20 back-to-back runs. With --sustain S, each algorithm instead runs back to back
// for S seconds and the time of the second half is reported: short bursts run at full clock,
// but a GPU held at its power limit (a server under load) lowers its clock until the watts fit,
// so there an algorithm's time follows the energy it spends. A diagnostic, not part of the build:
//   nvcc -std=c++17 -arch=sm_90a -O2 bench/gemm_algos.cu -lcublasLt -o /tmp/gemm_algos
//   /tmp/gemm_algos [--sustain S] [M ...]   (default: 25040 50080 6260, rounds of 4, 8 and 1
//                                            QuALITY requests)
// bench/results/2026-11-30-gemm-tuning-graphs.md has one run and what came of it,
// 2026-11-30-serve-energy.md a sustained one.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Shape {
  int n, k;
  bool add;  // beta = 1: a residual add in the product's epilogue
};
// qkv | gate, up | down | out (GDN) | z | attention q+gate | attention k, v | a, b
constexpr Shape kShapes[] = {{6144, 1024, false}, {3584, 1024, false}, {1024, 3584, true},
                             {1024, 2048, true},  {2048, 1024, false}, {4096, 1024, false},
                             {512, 1024, false},  {32, 1024, false}};
constexpr int kCandidates = 8;
constexpr size_t kWorkspace = size_t(32) << 20;

bool ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}
bool ok(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    std::fprintf(stderr, "%s: %s\n", what, cublasLtGetStatusString(s));
  return s == CUBLAS_STATUS_SUCCESS;
}

// Random bf16 values in [-0.05, 0.05) from a hash of the index (no zeros: they run faster).
__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16((float(h & 0xffff) / 65536.f - 0.5f) * 0.1f);
  }
}

int attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t which) {
  int v = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, which, &v, sizeof v, &written);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> rows;
  double sustain_s = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sustain") == 0 && i + 1 < argc)
      sustain_s = std::atof(argv[++i]);
    else
      rows.push_back(std::atoi(argv[i]));
  }
  if (rows.empty()) rows = {25040, 50080, 6260};
  const size_t max_m = size_t(*std::max_element(rows.begin(), rows.end()));
  const size_t max_n = 6144, max_k = 3584;
  cublasLtHandle_t lt = nullptr;
  __nv_bfloat16 *x = nullptr, *w = nullptr, *out = nullptr;
  void* workspace = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (!ok(cublasLtCreate(&lt), "cublasLtCreate") ||
      !ok(cudaMalloc(&x, max_m * max_k * 2), "cudaMalloc x") ||
      !ok(cudaMalloc(&w, max_n * max_k * 2), "cudaMalloc w") ||
      !ok(cudaMalloc(&out, max_m * max_n * 2), "cudaMalloc out") ||
      !ok(cudaMalloc(&workspace, kWorkspace), "cudaMalloc workspace") ||
      !ok(cudaEventCreate(&start), "cudaEventCreate") ||
      !ok(cudaEventCreate(&stop), "cudaEventCreate"))
    return 1;
  fill<<<1024, 256>>>(x, max_m * max_k, 1);
  fill<<<1024, 256>>>(w, max_n * max_k, 2);
  fill<<<1024, 256>>>(out, max_m * max_n, 3);

  for (const int m : rows) {
    for (const Shape& s : kShapes) {
      const float alpha = 1.f, beta = s.add ? 1.f : 0.f;
      cublasLtMatmulDesc_t desc = nullptr;
      cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
      cublasLtMatmulPreference_t pref = nullptr;
      const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
      const uint64_t workspace_bytes = kWorkspace;
      if (!ok(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc") ||
          !ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                             sizeof trans_a),
              "transa") ||
          !ok(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                             sizeof trans_b),
              "transb") ||
          !ok(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, s.k, s.n, s.k), "A") ||
          !ok(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, s.k, m, s.k), "B") ||
          !ok(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, s.n, m, s.n), "C") ||
          !ok(cublasLtMatmulPreferenceCreate(&pref), "preference") ||
          !ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace_bytes, sizeof workspace_bytes),
              "workspace preference"))
        return 1;
      cublasLtMatmulHeuristicResult_t results[kCandidates];
      int n_results = 0;
      if (!ok(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, kCandidates, results,
                                             &n_results),
              "heuristic"))
        return 1;
      std::printf("M %d N %d K %d%s: %d algorithms\n", m, s.n, s.k, s.add ? " (add)" : "",
                  n_results);
      const double flop = 2.0 * m * s.n * s.k;
      for (int i = 0; i < n_results; ++i) {
        auto run = [&] {
          return cublasLtMatmul(lt, desc, &alpha, w, a, x, b, &beta, out, c, out, c,
                                &results[i].algo, workspace, kWorkspace, nullptr);
        };
        for (int r = 0; r < 3; ++r) run();
        constexpr int kRuns = 20;
        auto time_runs = [&] {  // ms of kRuns back-to-back runs
          cudaEventRecord(start);
          for (int r = 0; r < kRuns; ++r) run();
          cudaEventRecord(stop);
          cudaEventSynchronize(stop);
          float ms = 0.f;
          cudaEventElapsedTime(&ms, start, stop);
          return double(ms);
        };
        double ms_per_run = 1e30;
        if (sustain_s > 0) {  // batches of kRuns until S seconds; the second half timed
          using Clock = std::chrono::steady_clock;
          const Clock::time_point t0 = Clock::now();
          double timed_ms = 0;
          long timed_runs = 0;
          for (double elapsed = 0; elapsed < sustain_s;
               elapsed = std::chrono::duration<double>(Clock::now() - t0).count()) {
            const double ms = time_runs();
            if (elapsed >= sustain_s / 2) timed_ms += ms, timed_runs += kRuns;
          }
          ms_per_run = timed_runs > 0 ? timed_ms / double(timed_runs) : 0.0;
        } else {
          for (int t = 0; t < 3; ++t) ms_per_run = std::min(ms_per_run, time_runs() / kRuns);
        }
        std::printf("  algo %2d: %8.1f us  %6.1f TFLOP/s  tile %d stages %d splitk %d ws %zu\n", i,
                    ms_per_run * 1e3, flop / (ms_per_run * 1e-3) / 1e12,
                    attr(results[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                    attr(results[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                    attr(results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                    results[i].workspaceSize);
      }
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(c);
      cublasLtMatrixLayoutDestroy(b);
      cublasLtMatrixLayoutDestroy(a);
      cublasLtMatmulDescDestroy(desc);
    }
  }
  if (!ok(cudaGetLastError(), "run")) return 1;
  return 0;
}
