// The FP8 products (make_cuda_ops with Quantization_fp8): the fused products' weights quantized
// once at load (quantize_weight), their activations each round, in the norm that makes them
// (rmsnorm_into_products) or on their own (quantized). All of them as
// kernels::quantize_rows_fp8 quantizes: a scale per row, the row's largest magnitude mapped to
// e4m3's 448. And the output projections' (the MLP's down, the GDN layer's out): their weights
// with a scale per 128 x 128 tile (quantize_output_weight), their inputs with a scale per row and
// 128 columns, written by the fused kernel that makes them (product_input_fp8), for cuBLASLt's
// block-scaled FP8 GEMM (gemm.cpp).
#include <cuda_bf16.h>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace flide {

bool CudaOps::wants_fp8_copy(View w, const char* op) const {
  if (quantization_ != Quantization::Quantization_fp8) return false;
  FLIDE_CHECK(w.dtype == DType::DType_bf16, "cuda ", op, ": the weight is ", dtype_name(w.dtype),
              ", must be bf16");
  return w.size() > 0;
}

// The arena hands out bf16 elements: rows x cols / 2 of them hold the bytes, scales x 2 the float
// scales.
std::pair<const uint8_t*, const float*> CudaOps::fp8_copy(View w, int64_t scales,
                                                          Fp8Quantizer quantize, const char* op) {
  const View data = alloc(w.rows, w.cols / 2), scale = alloc(scales, 2);
  cuda_check(quantize(static_cast<const __nv_bfloat16*>(w.data), w.rows, w.cols,
                      static_cast<uint8_t*>(data.data), static_cast<float*>(scale.data), stream_),
             op);
  return {static_cast<const uint8_t*>(data.data), static_cast<const float*>(scale.data)};
}

// A weight whose rows the FP8 tensor maps cannot take (a row of bytes must be a multiple of 16)
// keeps no copy: its products run in bf16.
void CudaOps::quantize_weight(View w) {
  if (!wants_fp8_copy(w, "quantize_weight") || w.cols % 16 != 0 || fp8_weights_.count(w.data))
    return;
  const auto [data, scale] = fp8_copy(w, w.rows, kernels::quantize_rows_fp8, "quantize_weight");
  fp8_weights_[w.data] = {data, scale};
}

// A weight whose sides are not whole 128 x 128 tiles keeps no copy: its product reads bf16.
void CudaOps::quantize_output_weight(View w) {
  if (!wants_fp8_copy(w, "quantize_output_weight") || w.rows % kernels::kFp8Block != 0 ||
      w.cols % kernels::kFp8Block != 0 || fp8_output_weights_.count(w.data))
    return;
  const int64_t scales = (w.rows / kernels::kFp8Block) * kernels::fp8_tile_scale_ld(w.cols);
  const auto [data, scale] =
      fp8_copy(w, scales, kernels::quantize_tiles_fp8, "quantize_output_weight");
  fp8_output_weights_[w.data] = {data, scale};
}

kernels::Fp8Blocks CudaOps::product_input_fp8(View out, View w_next) {
  product_fp8_ = {};
  const auto tiles = fp8_output_weights_.find(w_next.data);
  if (tiles == fp8_output_weights_.end() || w_next.cols != out.cols || out.rows == 0 ||
      out.dtype != DType::DType_bf16)
    return {};
  const int64_t M = out.rows, N = w_next.rows, K = out.cols, body = M / 4 * 4;
  if ((body > 0 && gemm_plan(fp8_blocks_key(body, N, K)).gemm_ex) ||
      (body < M && gemm_plan(fp8_blocks_key(4, N, K)).gemm_ex))
    return {};
  const int64_t rows = kernels::fp8_block_rows(M);
  const View data = scratch(rows, K / 2);  // bf16 elements: rows x K bytes
  const View scale = scratch_f32(K / kernels::kFp8Block, rows);
  product_fp8_ = {out.data,
                  M,
                  K,
                  w_next.data,
                  tiles->second,
                  {static_cast<uint8_t*>(data.data), static_cast<float*>(scale.data)}};
  return product_fp8_.form;
}

kernels::Fp8Rows CudaOps::fp8_weight(View w) const {
  const auto it = fp8_weights_.find(w.data);
  return it == fp8_weights_.end() ? kernels::Fp8Rows{} : it->second;
}

namespace {

// Where a norm's row scales start in its FP8 buffer: after the rows' bytes, 16-byte aligned.
size_t norm_scales_at(int64_t rows, int64_t cols) {
  return size_t(rows * cols + 15) / 16 * 16;
}

}  // namespace

// A norm's FP8 form costs its bytes once more on the way out, where quantizing its output apart
// read them back (65 passes of ~26 us a QuALITY round of 4 on the 0.8B model).
void CudaOps::rmsnorm_into_products(View x, View w, View out, double eps, bool unit_offset) {
  norm_fp8_ = {};
  const bool fp8 = quantization_ == Quantization::Quantization_fp8 &&
                   x.dtype == DType::DType_bf16 && w.dtype == DType::DType_bf16 &&
                   out.dtype == DType::DType_bf16 && w.size() == x.cols && out.rows == x.rows &&
                   out.cols == x.cols &&
                   kernels::rmsnorm_fp8_supported(x.data, w.data, out.data, x.cols);
  if (!fp8 || x.rows == 0) return rmsnorm(x, w, out, eps, unit_offset);
  const size_t scales_at = norm_scales_at(x.rows, x.cols);
  grow(norm_fp8_buf_, norm_fp8_cap_, scales_at + size_t(x.rows) * sizeof(float), "rmsnorm_fp8");
  norm_fp8_ = {out.data, out.rows, out.cols};
  if (!op_begin({x, w, out})) return;
  uint8_t* q = static_cast<uint8_t*>(norm_fp8_buf_);
  launched(kernels::rmsnorm_fp8(
               static_cast<const __nv_bfloat16*>(x.data), static_cast<const __nv_bfloat16*>(w.data),
               static_cast<__nv_bfloat16*>(out.data), q, reinterpret_cast<float*>(q + scales_at),
               x.rows, x.cols, float(eps), unit_offset, stream_),
           "rmsnorm_fp8");
}

kernels::Fp8Rows CudaOps::quantized(View x) {
  FLIDE_CHECK(x.dtype == DType::DType_bf16 && x.cols % 16 == 0, "cuda quantized: x [", x.rows, ", ",
              x.cols, "] ", dtype_name(x.dtype), " (bf16 rows of a multiple of 16)");
  if (norm_fp8_.of == x.data && norm_fp8_.rows == x.rows && norm_fp8_.cols == x.cols) {
    const uint8_t* q = static_cast<const uint8_t*>(norm_fp8_buf_);
    return {q, reinterpret_cast<const float*>(q + norm_scales_at(x.rows, x.cols))};
  }
  const View data = scratch(x.rows, x.cols / 2), scale = scratch_f32(x.rows, 1);
  const kernels::Fp8Rows q{static_cast<const uint8_t*>(data.data),
                           static_cast<const float*>(scale.data)};
  if (x.rows == 0 || !op_begin({x, data, scale})) return q;
  launched(kernels::quantize_rows_fp8(static_cast<const __nv_bfloat16*>(x.data), x.rows, x.cols,
                                      static_cast<uint8_t*>(data.data),
                                      static_cast<float*>(scale.data), stream_),
           "quantize_fp8");
  return q;
}

}  // namespace flide
