// The FP8 products (make_cuda_ops with Quantization_fp8): the fused products' weights quantized
// once at load (quantize_weight), their activations each round (quantized). Both go through
// kernels::quantize_rows_fp8: a scale per row, the row's largest magnitude mapped to e4m3's 448.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace flide {

// A weight whose rows the FP8 tensor maps cannot take (a row of bytes must be a multiple of 16)
// keeps no copy: its products run in bf16.
void CudaOps::quantize_weight(View w) {
  if (quantization_ != Quantization::Quantization_fp8) return;
  FLIDE_CHECK(w.dtype == DType::DType_bf16, "cuda quantize_weight: the weight is ",
              dtype_name(w.dtype), ", must be bf16");
  if (w.size() == 0 || w.cols % 16 != 0 || fp8_weights_.count(w.data)) return;
  // The arena hands out bf16 elements: rows x cols / 2 of them hold the bytes, rows x 2 the
  // float scales.
  const View data = alloc(w.rows, w.cols / 2), scale = alloc(w.rows, 2);
  cuda_check(kernels::quantize_rows_fp8(static_cast<const __nv_bfloat16*>(w.data), w.rows, w.cols,
                                        static_cast<uint8_t*>(data.data),
                                        static_cast<float*>(scale.data), stream_),
             "quantize_weight");
  fp8_weights_[w.data] = {static_cast<const uint8_t*>(data.data),
                          static_cast<const float*>(scale.data)};
}

kernels::Fp8Rows CudaOps::fp8_weight(View w) const {
  const auto it = fp8_weights_.find(w.data);
  return it == fp8_weights_.end() ? kernels::Fp8Rows{} : it->second;
}

kernels::Fp8Rows CudaOps::quantized(View x) {
  FLIDE_CHECK(x.dtype == DType::DType_bf16 && x.cols % 16 == 0, "cuda quantized: x [", x.rows, ", ",
              x.cols, "] ", dtype_name(x.dtype), " (bf16 rows of a multiple of 16)");
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
