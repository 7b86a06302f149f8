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
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_cuda.cuh"

namespace {

using flide::bench::ok;

struct Shape {
  int n, k;
  bool add;  // beta = 1: a residual add in the product's epilogue
};
// qkv | gate, up | down | out (GDN) | z | attention q+gate | attention k, v | a, b
constexpr Shape kShapes[] = {{6144, 1024, false}, {3584, 1024, false}, {1024, 3584, true},
                             {1024, 2048, true},  {2048, 1024, false}, {4096, 1024, false},
                             {512, 1024, false},  {32, 1024, false}};
constexpr int kCandidates = 8;

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
  if (!ok(cublasLtCreate(&lt), "cublasLtCreate") ||
      !ok(cudaMalloc(&x, max_m * max_k * 2), "cudaMalloc x") ||
      !ok(cudaMalloc(&w, max_n * max_k * 2), "cudaMalloc w") ||
      !ok(cudaMalloc(&out, max_m * max_n * 2), "cudaMalloc out") ||
      !ok(cudaMalloc(&workspace, flide::bench::kWorkspace), "cudaMalloc workspace"))
    return 1;
  flide::bench::fill<<<1024, 256>>>(x, max_m * max_k, 1, 0.05f);
  flide::bench::fill<<<1024, 256>>>(w, max_n * max_k, 2, 0.05f);
  flide::bench::fill<<<1024, 256>>>(out, max_m * max_n, 3, 0.05f);
  flide::bench::Timer timer;

  for (const int m : rows) {
    for (const Shape& s : kShapes) {
      flide::bench::LtGemm gemm;
      if (!gemm.make(lt, m, s.n, s.k, kCandidates)) return 1;
      std::printf("M %d N %d K %d%s: %zu algorithms\n", m, s.n, s.k, s.add ? " (add)" : "",
                  gemm.algos.size());
      const double flop = 2.0 * m * s.n * s.k;
      for (size_t i = 0; i < gemm.algos.size(); ++i) {
        const double ms_per_run = timer.ms_per_run(
            [&] { gemm.run(lt, i, x, w, out, s.add ? 1.f : 0.f, workspace); }, sustain_s);
        const cublasLtMatmulAlgo_t& algo = gemm.algos[i].algo;
        std::printf("  algo %2zu: %8.1f us  %6.1f TFLOP/s  tile %d stages %d splitk %d ws %zu\n", i,
                    ms_per_run * 1e3, flop / (ms_per_run * 1e-3) / 1e12,
                    attr(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                    attr(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                    attr(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), gemm.algos[i].workspaceSize);
      }
    }
  }
  if (!ok(cudaGetLastError(), "run")) return 1;
  return 0;
}
