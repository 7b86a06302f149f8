// CudaOps::matmul and matmul_add through cuBLASLt: bf16 inputs, fp32 compute and scale
// (CUBLAS_COMPUTE_32F), bf16 or fp32 output per out.dtype, on the backend stream with a 32 MiB
// workspace. matmul_add is the same product with beta = 1 and C = D = the accumulator: the
// heuristic's algorithm serves both (it does not depend on beta), so they share plans.
//
// Layout: cuBLASLt is column-major, our views row-major. A row-major [r, c] matrix is the
// column-major [c, r] matrix with leading dimension c, so
//   out[M, N] = x[M, K] . w[N, K]^T   (row-major)
// is, in column-major terms,
//   out^T [N, M] = w^T^T . x^T = op_T(W_cm [K, N]) . X_cm [K, M]
// i.e. A = w stored [K, N] (ld K) with transa = T, B = x stored [K, M] (ld K) with transb = N,
// C = D = out stored [N, M] (ld N). No data is transposed.
//
// Batch-invariant mode (make_cuda_ops): GEMMs of fewer than kGemmPinRows rows run the algorithm
// of the shape's kGemmPinRows-row plan (where cuBLASLt says it takes M), so that a row's
// bits do not depend on how many rows share its GEMM, i.e. on the other requests of a server's
// round. For a few rows and a long K (the last layer's down projection on the read rows: 18 a
// QuALITY request, K = 3584) the heuristic picks kernels whose rows differ in the last bits from
// those of the kernels it picks from ~1,000 rows up, which agree with each other (measured on the
// H200; not split-K reductions: ruling those out changed nothing). Those bits flipped near-tie
// answers between rounds of 1 and of many requests. The pinned kernels waste most of their tiles
// on a few rows: rounds under kGemmPinRows token rows (a lone short request) run slower. The
// kGemmPinRows-row plan is an ordinary cache entry (below), so a shape asks the heuristic for it
// once, however many row counts under it a server's rounds bring.
// CudaGemmInvariance.RowsIgnoreTheRowCount checks the claim on every GEMM shape of the models.
//
// FP8 blocks (--quantization fp8, fp8.cpp): matmul_add whose x its producer wrote only as
// kernels::Fp8Blocks (swiglu_into_product, z_gated_rmsnorm_into_product) runs on that form and on
// w's copy with a scale per 128 x 128 tile: cuBLASLt's VEC128_32F scales for B = x and
// BLK128x128_32F for A = w, fp32 accumulation, the same C = D = acc in place. Its plans are keyed
// apart (GemmOperands), pinned alike in batch-invariant mode, and have no cublasGemmEx fallback:
// a shape the heuristic refuses makes the producer write bf16 instead (product_input_fp8 asks
// first). The scale pointers are descriptor attributes, set before each call. cuBLASLt takes
// such products only for row counts that are multiples of 4: the last 1-3 rows of another count
// run as a product of 4 rows of their own (kernels::fp8_block_scale_at), on a copy of their
// accumulator rows in scratch. On an H100, alone at full clock, such a product took 0.63-0.66 of
// the bf16 one's time on the down and out projections of a QuALITY round (M 30,720-61,440, N
// 1,024, K 2,048-3,584; bench/results/2026-12-07-fp8-output-projections.md).
//
// The descriptors, layouts and the heuristic's first algorithm are cached per (M, N, K, out
// dtype, operands, pointer alignments), for the kGemmPlans most recently used keys: the heuristic
// call costs tens of microseconds, and the forward repeats a handful of shapes a round. The
// alignments are part of the key because cuBLASLt's heuristic assumes 256-byte aligned pointers
// unless told otherwise. Where the heuristic offers nothing (older cuBLASLt releases refused some
// degenerate shapes, e.g. a dimension of 1), the shape runs through cublasGemmEx with the same
// operands and compute type.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace flide {

namespace {

int alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % uintptr_t(align) != 0) align /= 2;
  return align;
}

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(cat("cuda backend: matmul: ", what, ": ", cublasLtGetStatusString(st)));
}

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value, const char* what) {
  lt_check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value), what);
}

// An FP8 plan's scales: w's (A) and x's (B). cuBLASLt reads them when a GEMM is enqueued (below).
void set_scales(cublasLtMatmulDesc_t desc, const void* w_scale, const void* x_scale) {
  set_attribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale, "A scale");
  set_attribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, x_scale, "B scale");
}

}  // namespace

void CudaOps::destroy_plan(GemmPlan& p) noexcept {
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  p = GemmPlan{};
}

const CudaOps::GemmPlan& CudaOps::gemm_plan(const GemmKey& key) {
  const auto found = gemm_plans_.find(key);
  if (found != gemm_plans_.end()) {
    gemm_lru_.splice(gemm_lru_.begin(), gemm_lru_, found->second);
    return found->second->second;
  }
  const auto [M, N, K, out_type, operands, align_x, align_w, align_out] = key;
  const bool fp8 = operands == GemmOperands::GemmOperands_fp8_blocks;
  const cudaDataType_t c_type = DType(out_type) == DType::DType_f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t ab_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  GemmPlan p;
  cublasLtMatmulPreference_t pref = nullptr;
  try {
    lt_check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T, "transa");
    set_attribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N, "transb");
    if (fp8) {  // A = w: a scale per 128 x 128 tile; B = x: per column and 128 rows of K
      set_attribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                    int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F), "A scale mode");
      set_attribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                    int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F), "B scale mode");
      // The heuristic sees device pointers where the scales go; each call sets its own.
      set_scales(p.desc, gemm_workspace_, gemm_workspace_);
    }
    lt_check(cublasLtMatrixLayoutCreate(&p.a, ab_type, uint64_t(K), uint64_t(N), K), "A");
    lt_check(cublasLtMatrixLayoutCreate(&p.b, ab_type, uint64_t(K), uint64_t(M), K), "B");
    lt_check(cublasLtMatrixLayoutCreate(&p.c, c_type, uint64_t(N), uint64_t(M), N), "C");

    lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t workspace = kGemmWorkspaceBytes;
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &workspace, sizeof workspace),
             "workspace preference");
    const uint32_t aligns[4] = {uint32_t(align_w), uint32_t(align_x), uint32_t(align_out),
                                uint32_t(align_out)};
    const cublasLtMatmulPreferenceAttributes_t align_attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      lt_check(
          cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof aligns[i]),
          "alignment preference");

    cublasLtMatmulHeuristicResult_t result{};
    int n_results = 0;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (batch_invariant_ && M < kGemmPinRows) {  // the kGemmPinRows plan's algorithm, if it fits
      const GemmPlan& pinned =
          gemm_plan({kGemmPinRows, N, K, out_type, operands, align_x, align_w, align_out});
      cublasLtMatmulHeuristicResult_t check{};
      if (!pinned.gemm_ex &&
          cublasLtMatmulAlgoCheck(lt_, p.desc, p.a, p.b, p.c, p.c, &pinned.algo, &check) ==
              CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= kGemmWorkspaceBytes) {
        result.algo = pinned.algo;
        n_results = 1;
      }
    }
    if (n_results == 0)
      st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result,
                                          &n_results);
    cublasLtMatmulPreferenceDestroy(pref);
    pref = nullptr;
    if (st == CUBLAS_STATUS_SUCCESS && n_results > 0) {
      p.algo = result.algo;
    } else {
      p.gemm_ex = true;  // FP8 operands have no fallback: product_input_fp8 writes bf16 instead
      if (!fp8 && !blas_) {
        const cublasStatus_t bst = cublasCreate(&blas_);
        if (bst != CUBLAS_STATUS_SUCCESS)
          throw Error(cat("cuda backend: matmul: cuBLASLt has no algorithm for x [", M, ", ", K,
                          "] . w [", N, ", ", K, "]^T (", cublasLtGetStatusString(st),
                          ") and cublasCreate failed: ", cublasGetStatusString(bst)));
        lt_check(cublasSetStream(blas_, stream_), "cublasSetStream");
        lt_check(cublasSetWorkspace(blas_, gemm_workspace_, kGemmWorkspaceBytes),
                 "cublasSetWorkspace");
      }
    }
  } catch (...) {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    destroy_plan(p);
    throw;
  }
  // cuBLASLt reads descriptors when a GEMM is enqueued, not when it runs (frameworks destroy
  // theirs right after cublasLtMatmul returns), so an evicted plan's GEMMs may still be in
  // flight, or in a captured graph.
  if (gemm_lru_.size() >= kGemmPlans) {
    gemm_plans_.erase(gemm_lru_.back().first);
    destroy_plan(gemm_lru_.back().second);
    gemm_lru_.pop_back();
  }
  gemm_lru_.emplace_front(key, p);
  gemm_plans_.emplace(key, gemm_lru_.begin());
  return gemm_lru_.front().second;
}

void CudaOps::matmul(View x, View w, View out) {
  gemm(x, w, out, false);
}

void CudaOps::matmul_add(View x, View w, View acc) {
  if (product_fp8_.of && product_fp8_.of == x.data) return gemm_fp8_blocks(x, w, acc);
  gemm(x, w, acc, true);
}

CudaOps::GemmKey CudaOps::fp8_blocks_key(int64_t M, int64_t N, int64_t K) {
  return {M, N, K, int(DType::DType_bf16), GemmOperands::GemmOperands_fp8_blocks, 256, 256, 16};
}

// The rows in two products where M is not a multiple of 4 (kernels::fp8_block_scale_at): the
// body's in place, and the 1-3 tail rows' through a 4-row copy of them in scratch.
void CudaOps::gemm_fp8_blocks(View x, View w, View acc) {
  const ProductFp8 in = product_fp8_;
  product_fp8_ = {};  // read once
  FLIDE_CHECK(in.rows == x.rows && in.cols == x.cols && in.w_next == w.data, "cuda matmul_add: x [",
              x.rows, ", ", x.cols,
              "] holds only the FP8 form its producer wrote for another product (x [", in.rows,
              ", ", in.cols, "] . its w_next)");
  FLIDE_CHECK(acc.dtype == DType::DType_bf16 && acc.rows == x.rows && acc.cols == w.rows &&
                  alignment_of(acc.data) >= 16,
              "cuda matmul_add on FP8 blocks: acc [", acc.rows, ", ", acc.cols, "] ",
              dtype_name(acc.dtype), " (must be bf16 [", x.rows, ", ", w.rows,
              "], 16-byte aligned)");
  const Fp8Tiles w8 = in.w_next_tiles;
  const int64_t M = x.rows, N = w.rows, K = x.cols, body = M / 4 * 4, tail = M - body;
  const View tail_acc = tail > 0 ? scratch(4, N) : View{};
  if (!op_begin_shaped({x, w, acc}, {1}, M, N, K)) return;
  const auto product = [&](int64_t rows, const uint8_t* x_rows, const float* x_scales, void* out) {
    const GemmPlan& p = gemm_plan(fp8_blocks_key(rows, N, K));
    set_scales(p.desc, w8.scale, x_scales);
    const float alpha = 1.0f, beta = 1.0f;  // in place, as matmul_add
    const cublasStatus_t st =
        cublasLtMatmul(lt_, p.desc, &alpha, w8.data, p.a, x_rows, p.b, &beta, out, p.c, out, p.c,
                       &p.algo, gemm_workspace_, kGemmWorkspaceBytes, stream_);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw Error(cat("cuda backend: matmul_add x [", rows, ", ", K, "] . w [", N, ", ", K,
                      "]^T on FP8 blocks: cublasLtMatmul: ", cublasLtGetStatusString(st)));
  };
  if (body > 0) product(body, in.form.data, in.form.scale, acc.data);
  if (tail > 0) {
    const size_t row_bytes = size_t(N) * sizeof(__nv_bfloat16);
    char* acc_tail = static_cast<char*>(acc.data) + size_t(body) * row_bytes;
    cuda_check(cudaMemcpyAsync(tail_acc.data, acc_tail, size_t(tail) * row_bytes,
                               cudaMemcpyDeviceToDevice, stream_),
               "matmul_add_fp8 (tail rows in)");
    product(4, in.form.data + body * K, in.form.scale + (K / kernels::kFp8Block) * body,
            tail_acc.data);
    cuda_check(cudaMemcpyAsync(acc_tail, tail_acc.data, size_t(tail) * row_bytes,
                               cudaMemcpyDeviceToDevice, stream_),
               "matmul_add_fp8 (tail rows out)");
  }
  launched(cudaSuccess, "matmul_add_fp8");
}

void CudaOps::gemm(View x, View w, View out, bool accumulate) {
  const char* op = accumulate ? "matmul_add" : "matmul";
  const char* out_name = accumulate ? "acc" : "out";
  FLIDE_CHECK(x.dtype == DType::DType_bf16 && w.dtype == DType::DType_bf16, "cuda ", op, ": x is ",
              dtype_name(x.dtype), ", w is ", dtype_name(w.dtype), "; both must be bf16");
  FLIDE_CHECK(out.dtype == DType::DType_bf16 || out.dtype == DType::DType_f32, "cuda ", op, ": ",
              out_name, " is ", dtype_name(out.dtype), "; must be bf16 or f32");
  FLIDE_CHECK(x.cols == w.cols && out.rows == x.rows && out.cols == w.rows, "cuda ", op, ": x [",
              x.rows, ", ", x.cols, "] w [", w.rows, ", ", w.cols, "] ", out_name, " [", out.rows,
              ", ", out.cols, "]");
  FLIDE_CHECK(!product_fp8_.of || product_fp8_.of != x.data, "cuda ", op, ": x [", x.rows, ", ",
              x.cols, "] holds only the FP8 form its producer wrote for matmul_add");
  const int64_t M = x.rows, N = w.rows, K = x.cols;
  if (M == 0 || N == 0 || (K == 0 && accumulate)) return;
  if (K == 0) return fill_zero(out);
  const GemmKey key{M,
                    N,
                    K,
                    int(out.dtype),
                    GemmOperands::GemmOperands_bf16,
                    alignment_of(x.data),
                    alignment_of(w.data),
                    alignment_of(out.data)};
  const GemmPlan& p = gemm_plan(key);
  // beta = 1 reads C = out before the sum is rounded to it (D = out too: in place).
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // The plan lookup above (a heuristic call on a new shape) stays outside the profiled span.
  if (!op_begin_shaped({x, w, out}, {}, M, N, K)) return;
  if (p.gemm_ex) {  // the layout of the comment at the top, as cuBLAS arguments
    const cudaDataType_t c_type = out.dtype == DType::DType_f32 ? CUDA_R_32F : CUDA_R_16BF;
    const cublasStatus_t st =
        cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, w.data,
                     CUDA_R_16BF, int(K), x.data, CUDA_R_16BF, int(K), &beta, out.data, c_type,
                     int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
      throw Error(
          cat("cuda backend: ", op, " x [", M, ", ", K, "] . w [", N, ", ", K,
              "]^T: cublasGemmEx (cuBLASLt offered no algorithm): ", cublasGetStatusString(st)));
    return launched(cudaSuccess,
                    accumulate ? "matmul_add (cublasGemmEx)" : "matmul (cublasGemmEx)");
  }
  const cublasStatus_t st =
      cublasLtMatmul(lt_, p.desc, &alpha, w.data, p.a, x.data, p.b, &beta, out.data, p.c, out.data,
                     p.c, &p.algo, gemm_workspace_, kGemmWorkspaceBytes, stream_);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw Error(cat("cuda backend: ", op, " x [", M, ", ", K, "] . w [", N, ", ", K,
                    "]^T: cublasLtMatmul: ", cublasLtGetStatusString(st)));
  launched(cudaSuccess, op);
}

}  // namespace flide
