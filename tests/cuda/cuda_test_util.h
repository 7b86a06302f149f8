// Shared pieces of the GPU tests: the skip when no CUDA device is present, a pair of backends
// (CUDA bf16 and the CPU float64 reference) fed identical inputs, the error measure with its
// tolerances, and a table of the worst errors printed at the end of the run (the numbers the
// lead records). Tree streams, random floats and out-row picking come from the CPU op tests.
//
// Identical inputs: every bf16 view gets host data rounded to bf16 (round to nearest even)
// before upload, and the CPU reference gets the same rounded floats, so the two backends start
// from the same numbers and differ only by the CUDA side's fp32 arithmetic and its roundings of
// results to bf16. f32 views (gates, recurrent state) take the floats as they are on both sides.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../ops/ops_test_util.h"
#include "backend/ops.h"
#include "backend/stream.h"
#include "core/error.h"

namespace flide::test {

inline bool cuda_device_present() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define FLIDE_SKIP_WITHOUT_CUDA() \
  if (!::flide::test::cuda_device_present()) GTEST_SKIP() << "no CUDA device"

// ---- tolerances (relative RMS error, see rel_rms) ----
// Pure data movement (embed, gather_rows, the query's gate halves, conv windows): the bits
// of a bf16 input come out unchanged, so the error is exactly 0.
// bf16 outputs: inputs are bf16-exact on both sides; the kernel computes in fp32 (relative
// error ~1e-7 per operation) and rounds its result to bf16 once (at most 2^-9 relative, about
// 1.1e-3 RMS for spread values). Kernels that also round intermediates to bf16 for the tensor
// cores (the softmax weights in attention, chunk operands in the delta rule) add a few such
// roundings (or tf32 ones, 2^-11), ~3e-3. 1e-2 keeps a margin over that; a wrong formula
// (norm offset, head grouping, visibility, rotation pairing, a missed state) moves results by
// O(1e-1) or more.
constexpr double kTolBf16 = 1e-2;
// fp32 outputs from bf16-exact inputs (matmul into f32, select_logits, gdn gates): products of
// bf16 values are exact in fp32, sums of <= 1000 terms round at ~1e-7 each, and the kernels are
// built with --use_fast_math (exp/log within a few ulp): 1e-5 expected, 1e-4 allowed.
constexpr double kTolF32Out = 1e-4;
// The delta-rule state (fp32, written back to the slots): the inputs are exact and the
// recurrence is contractive (|k| = 1, beta in (0, 1), decay <= 1), so fp32 arithmetic alone
// gives ~1e-6. The kernel (kernels/gdn.h) rounds every operand of its tensor-core products to
// bf16 as fla's kernels do (the state, v_new, beta V - beta exp(gamma) K S, T and P: 2^-9
// relative, ~1e-3 RMS each), and the error is fed back through v_new over the chunks: 2.0-2.4e-3
// on the H200 (1.7-1.8e-3 when T, P and v_new's products were tf32). 4e-3 allows that with a
// margin; a state bug (wrong slot, missed decay, a dropped chunk) is O(1).
constexpr double kTolState = 4e-3;

// Round to the nearest bf16, ties to even (what __float2bfloat16 does); NaN stays NaN.
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

inline std::vector<float> rounded_bf16(std::vector<float> v) {
  for (float& x : v) x = round_bf16(x);
  return v;
}

// ||got - ref||_2 / ||ref||_2 over all elements; infinity when any entry of `got` is NaN or
// the sizes differ (NaN-poisoned outputs that the op failed to write end up here).
inline double rel_rms(const Vec& got, const Vec& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Index of the first entry that differs (NaN equals NaN), or -1.
inline int64_t first_difference(const Vec& got, const Vec& ref) {
  if (got.size() != ref.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool nan_a = std::isnan(got[i]), nan_b = std::isnan(ref[i]);
    if (nan_a != nan_b || (!nan_a && got[i] != ref[i])) return int64_t(i);
  }
  return -1;
}

// Total variation distance of two distributions over the same options, and the top option.
inline double tvd(const std::vector<double>& p, const std::vector<double>& q) {
  double sum = 0;
  for (size_t i = 0; i < p.size() && i < q.size(); ++i) sum += std::abs(p[i] - q[i]);
  return 0.5 * sum;
}
inline size_t argmax(const std::vector<double>& p) {
  return size_t(std::max_element(p.begin(), p.end()) - p.begin());
}

// The worst error per op against its tolerance, printed once at the end of the run.
class CudaReport : public ::testing::Environment {
 public:
  static std::map<std::string, std::pair<double, double>>& worst() {  // label -> (err, tol)
    static std::map<std::string, std::pair<double, double>> table;
    return table;
  }
  static std::vector<std::string>& lines() {  // free-form results (model-level figures)
    static std::vector<std::string> list;
    return list;
  }
  void TearDown() override {
    if (worst().empty() && lines().empty()) return;
    std::printf("CUDA vs CPU float64: worst relative RMS error per op (tolerance):\n");
    for (const auto& [label, e] : worst())
      std::printf("  %-40s %.3e  (tol %.0e)\n", label.c_str(), e.first, e.second);
    for (const std::string& line : lines()) std::printf("  %s\n", line.c_str());
  }
};
inline ::testing::Environment* const kCudaReport =
    ::testing::AddGlobalTestEnvironment(new CudaReport);

inline void record(const std::string& label, double err, double tolerance) {
  auto [it, fresh] = CudaReport::worst().try_emplace(label, err, tolerance);
  if (!fresh && err > it->second.first) it->second = {err, tolerance};
}

inline void expect_rms(const std::string& op, const Vec& got, const Vec& ref, double tolerance,
                       const std::string& context = "") {
  const double err = rel_rms(got, ref);
  EXPECT_LE(err, tolerance) << op << " " << context << ": relative RMS error " << err;
  record(op, err, tolerance);
}

// The rows from `first` on of a host copy of [rows, cols] are exactly zero (a padded round's
// tail, which the tree ops write as zeros: backend/stream.h).
inline void expect_zero_rows(const std::string& op, const Vec& got, int64_t first, int64_t cols) {
  int64_t nonzero = 0;
  for (size_t i = size_t(first * cols); i < got.size(); ++i) nonzero += got[i] != 0.0;
  EXPECT_EQ(nonzero, 0) << op << ": elements of the padding rows from row " << first
                        << " that are not zero";
}

// Exact equality (NaN == NaN), for pure data movement.
inline void expect_exact(const std::string& op, const Vec& got, const Vec& ref,
                         const std::string& context = "") {
  const int64_t at = first_difference(got, ref);
  EXPECT_EQ(at, -1) << op << " " << context << ": first difference at element " << at
                    << (at >= 0 && size_t(at) < got.size() && size_t(at) < ref.size()
                            ? cat(": ", got[at], " vs ", ref[at])
                            : std::string());
  record(op + " (exact)", at == -1 ? 0.0 : std::numeric_limits<double>::infinity(), 0.0);
}

// Rows [r, rows) of v: the same memory (a view at an offset, e.g. a badly aligned one).
inline View rows_from(const View& v, int64_t r) {
  return View{static_cast<char*>(v.data) + size_t(r * v.cols) * dtype_size(v.dtype), v.rows - r,
              v.cols, v.dtype};
}

// The two backends with the same data on both.
class Pair {
 public:
  explicit Pair(Quantization quantization = Quantization::Quantization_none)
      : gpu_(make_cuda_ops(0, false, quantization)), cpu_(make_cpu_ops(DType::DType_f64, 0)) {}
  Ops& gpu() { return *gpu_; }
  Ops& cpu() { return *cpu_; }

  struct Buf {
    View gpu, cpu;
    Buf reshaped(int64_t cols) const { return {gpu.reshaped(cols), cpu.reshaped(cols)}; }
    // Rows [r, rows) of the same memory (for views at an offset, e.g. badly aligned ones).
    Buf rows_from(int64_t r) const { return {test::rows_from(gpu, r), test::rows_from(cpu, r)}; }
  };
  struct Side {
    bool gpu;
    View operator()(const Buf& b) const { return gpu ? b.gpu : b.cpu; }
  };
  // Runs fn(ops, side) on the GPU, then on the CPU; side(buf) picks that backend's view.
  template <typename Fn>
  void both(Fn&& fn) {
    fn(*gpu_, Side{true});
    fn(*cpu_, Side{false});
  }
  void set_stream(const Stream& s) {
    gpu_->set_stream(s);
    cpu_->set_stream(s);
  }

  // A bf16 view on the GPU (data rounded to bf16 first; the CPU gets the same values), or with
  // f32 = true an fp32 view (scratch_f32) and the data as it is.
  Buf put(int64_t rows, int64_t cols, std::vector<float> host, bool f32 = false) {
    EXPECT_EQ(int64_t(host.size()), rows * cols);
    if (!f32) host = rounded_bf16(std::move(host));
    Buf b{f32 ? gpu_->scratch_f32(rows, cols) : gpu_->alloc(rows, cols), cpu_->alloc(rows, cols)};
    gpu_->upload(b.gpu, host.data());
    cpu_->upload(b.cpu, host.data());
    return b;
  }
  // An output filled with NaN on both sides, so that any element the op fails to write shows.
  Buf poison(int64_t rows, int64_t cols, bool f32 = false) {
    return put(rows, cols,
               std::vector<float>(size_t(rows * cols), std::numeric_limits<float>::quiet_NaN()),
               f32);
  }
  Vec got(const Buf& b) { return get(*gpu_, b.gpu); }
  Vec got(View gpu_view) { return get(*gpu_, gpu_view); }  // a GPU-only view
  Vec ref(const Buf& b) { return get(*cpu_, b.cpu); }

 private:
  static Vec get(Ops& ops, View v) {
    Vec out(size_t(v.size()));
    ops.download(v, out.data());
    return out;
  }
  std::unique_ptr<Ops> gpu_, cpu_;
};

// The names of the ops the GPU backend ran inside fn, from its profile (a download or
// synchronize ends the profiled round): which path a dispatch rule took.
template <typename Fn>
std::set<std::string> ops_run(Ops& gpu, Fn&& fn) {
  gpu.set_profiling(true);
  fn();
  gpu.synchronize();
  gpu.set_profiling(false);
  std::set<std::string> names;
  std::istringstream report(gpu.profile_report());
  std::string line;
  bool in_table = false;
  while (std::getline(report, line)) {  // the by-op table: from its "op" header to "(gaps"
    if (line.rfind("op ", 0) == 0) {
      in_table = true;
    } else if (in_table) {
      if (line.empty() || line[0] == '(') break;
      names.insert(line.substr(0, line.find(' ')));
    }
  }
  return names;
}

// Fixtures that skip without a device.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override { FLIDE_SKIP_WITHOUT_CUDA(); }
};

template <typename P>
class CudaTestWithParam : public ::testing::TestWithParam<P> {
 protected:
  void SetUp() override { FLIDE_SKIP_WITHOUT_CUDA(); }
};

// Rows of unit L2 norm per head_dim-wide piece (what the delta rule expects of q and k).
inline std::vector<float> unit_rows(std::vector<float> v, int64_t dim) {
  for (size_t r = 0; r + size_t(dim) <= v.size(); r += size_t(dim)) {
    double sum = 0;
    for (int64_t d = 0; d < dim; ++d) sum += double(v[r + d]) * v[r + d];
    const double inv = sum > 0 ? 1.0 / std::sqrt(sum) : 0.0;
    for (int64_t d = 0; d < dim; ++d) v[r + d] = float(v[r + d] * inv);
  }
  return v;
}

}  // namespace flide::test
