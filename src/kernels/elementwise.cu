// Elementwise ops over flat bf16 tensors: the SwiGLU and attention-gate products, the GDN
// decay / write gates, and bf16 <-> fp32 conversions (the residual add is in the epilogue of the
// product before it, CudaOps::matmul_add). Grid-stride loops over 8-element chunks (one 16-byte
// access per operand) when every pointer is 16-byte aligned, then a scalar tail; element by
// element otherwise. Each output is computed in fp32 from its inputs and rounded once, as
// PyTorch's bf16 elementwise kernels do.
#include <cmath>

#include "kernels/bf16x8.cuh"
#include "kernels/dense.h"

namespace flide::kernels {
namespace {

using detail::load8;
using detail::store8;

// f.chunk(i) handles elements [8i, 8i + 8), f.one(i) element i.
template <class F>
__global__ void elementwise_kernel(F f, int64_t n, bool vec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t scalar_begin = 0;
  if (vec) {
    const int64_t n_chunks = n / 8;
    for (int64_t i = tid; i < n_chunks; i += stride) f.chunk(i);
    scalar_begin = 8 * n_chunks;
  }
  for (int64_t i = scalar_begin + tid; i < n; i += stride) f.one(i);
}

template <class F>
cudaError_t launch_elementwise(const F& f, int64_t n, bool vec, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int threads = 256;
  elementwise_kernel<<<detail::blocks_for(vec ? (n + 7) / 8 : n, threads), threads, 0, stream>>>(
      f, n, vec);
  return cudaGetLastError();
}

// out = f(a, b) elementwise, in fp32 with one rounding. No __restrict__: sigmoid_mul writes over
// a, and silu_mul's out may alias gate or up; each element is read and then written by one
// thread, so aliasing is harmless.
template <class F>
struct BinaryOp {
  const bf16* a;
  const bf16* b;
  bf16* out;
  F f;
  __device__ void chunk(int64_t i) const {
    float x[8], y[8];
    load8(a + 8 * i, 8, true, x);
    load8(b + 8 * i, 8, true, y);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = f(x[k], y[k]);
    store8(out + 8 * i, 8, true, x);
  }
  __device__ void one(int64_t i) const {
    out[i] = __float2bfloat16_rn(f(__bfloat162float(a[i]), __bfloat162float(b[i])));
  }
};

struct SiluTimes {  // silu(gate) * up
  __device__ float operator()(float g, float u) const { return detail::silu_times(g, u); }
};
struct TimesSigmoid {  // x * sigmoid(gate)
  __device__ float operator()(float x, float g) const { return detail::times_sigmoid(x, g); }
};

template <class F>
cudaError_t launch_binary(const bf16* a, const bf16* b, bf16* out, int64_t n, cudaStream_t stream) {
  const bool vec = detail::aligned16(a) && detail::aligned16(b) && detail::aligned16(out);
  return launch_elementwise(BinaryOp<F>{a, b, out, F{}}, n, vec, stream);
}

struct F32ToBf16Op {
  const float* in;
  bf16* out;
  __device__ void chunk(int64_t i) const {
    const float4 lo = reinterpret_cast<const float4*>(in)[2 * i];
    const float4 hi = reinterpret_cast<const float4*>(in)[2 * i + 1];
    const float f[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    store8(out + 8 * i, 8, true, f);
  }
  __device__ void one(int64_t i) const { out[i] = __float2bfloat16_rn(in[i]); }
};

struct Bf16ToF32Op {
  const bf16* in;
  float* out;
  __device__ void chunk(int64_t i) const {
    float f[8];
    load8(in + 8 * i, 8, true, f);
    reinterpret_cast<float4*>(out)[2 * i] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(out)[2 * i + 1] = make_float4(f[4], f[5], f[6], f[7]);
  }
  __device__ void one(int64_t i) const { out[i] = __bfloat162float(in[i]); }
};

// g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b). g feeds exp(g) and its running
// sums over a whole chunk, so it is worth full fp32 accuracy: --use_fast_math would turn expf
// into the approximate __expf (error growing with |x|), hence exp / log1p in double, each
// rounded to fp32, where HF calls fp32 exp / log1p (≤ 1 fp32 ulp apart). The product and sum
// stay fp32 as in HF. Only T * Hv elements, so the fp64 cost is negligible.
__global__ void gdn_gates_kernel(const bf16* ab, const bf16* A_log, const bf16* dt_bias, float* g,
                                 float* beta, int64_t n, int Hv) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / Hv;
    const int j = int(i - t * Hv);
    const bf16* a = ab + t * 2 * Hv;
    const float x = __fadd_rn(__bfloat162float(a[j]), __bfloat162float(dt_bias[j]));
    // F.softplus(beta = 1, threshold = 20).
    const float softplus = x > 20.f ? x : float(log1p(exp(double(x))));
    const float decay = float(exp(double(__bfloat162float(A_log[j]))));
    g[i] = -__fmul_rn(decay, softplus);
    beta[i] = float(1.0 / (1.0 + exp(-double(__bfloat162float(a[Hv + j])))));
  }
}

}  // namespace

cudaError_t silu_mul(const bf16* gate, const bf16* up, bf16* out, int64_t n, cudaStream_t stream) {
  return launch_binary<SiluTimes>(gate, up, out, n, stream);
}

cudaError_t sigmoid_mul(bf16* x, const bf16* gate, int64_t n, cudaStream_t stream) {
  return launch_binary<TimesSigmoid>(x, gate, x, n, stream);
}

cudaError_t f32_to_bf16(const float* in, bf16* out, int64_t n, cudaStream_t stream) {
  const bool vec = detail::aligned16(in) && detail::aligned16(out);
  return launch_elementwise(F32ToBf16Op{in, out}, n, vec, stream);
}

cudaError_t bf16_to_f32(const bf16* in, float* out, int64_t n, cudaStream_t stream) {
  const bool vec = detail::aligned16(in) && detail::aligned16(out);
  return launch_elementwise(Bf16ToF32Op{in, out}, n, vec, stream);
}

cudaError_t gdn_gates(const bf16* ab, const bf16* A_log, const bf16* dt_bias, float* g, float* beta,
                      int64_t T, int Hv, cudaStream_t stream) {
  const int64_t n = T * Hv;
  if (n <= 0) return cudaSuccess;
  constexpr int threads = 256;
  gdn_gates_kernel<<<detail::blocks_for(n, threads), threads, 0, stream>>>(ab, A_log, dt_bias, g,
                                                                           beta, n, Hv);
  return cudaGetLastError();
}

}  // namespace flide::kernels
