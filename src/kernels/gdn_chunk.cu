// Chunked gated delta rule over one tree level (spec qwen3_5.md §4.1), the CUDA twin of the CPU
// reference's gdn_chunked_head: the launcher that carves the workspace and runs the three kernels
// of gdn_prepare.cu and gdn_state.cu in order on one stream (gdn.h says what each computes;
// gdn_chunk.cuh holds what they share).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/bf16x8.cuh"
#include "kernels/gdn.h"
#include "kernels/gdn_chunk.cuh"
#include "kernels/launch.cuh"

namespace flide::kernels {

using gdn_detail::bf16;
using gdn_detail::GdnArgs;
using gdn_detail::kChunk;
using gdn_detail::Workspace;

namespace {

struct WorkspaceLayout {
  size_t T, P, gam, chunks, total;
};

WorkspaceLayout workspace_layout(int64_t T, int heads_v) {
  auto round_up = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t rows = size_t(heads_v) * size_t(T);
  // chunks of a level <= sum over its nodes of (length / 64 + 1) <= T / 64 + T
  const size_t list = size_t(T) + size_t(T + kChunk - 1) / kChunk + 2;
  WorkspaceLayout l{};
  size_t o = 0;
  l.T = o, o += round_up(rows * kChunk * sizeof(bf16));
  l.P = o, o += round_up(rows * kChunk * sizeof(bf16));
  l.gam = o, o += round_up(rows * 4);
  l.chunks = o, o += round_up(list * sizeof(int2));
  l.total = o;
  return l;
}

template <int DK, int DV>
cudaError_t launch_gdn(GdnArgs a, void* workspace) {
  using D = gdn_detail::Dims<DK, DV>;
  if (!detail::aligned(a.q, D::kVecK * 2) || !detail::aligned(a.k, D::kVecK * 2) ||
      !detail::aligned(a.v, D::kVecV * 2) || !detail::aligned(a.out, DV % 8 == 0 ? 16 : 4) ||
      !detail::aligned(workspace, 16))
    return cudaErrorMisalignedAddress;
  const WorkspaceLayout l = workspace_layout(a.meta.n_tokens, a.heads_v);
  unsigned char* base = static_cast<unsigned char*>(workspace);
  a.ws =
      Workspace{reinterpret_cast<bf16*>(base + l.T), reinterpret_cast<bf16*>(base + l.P),
                reinterpret_cast<float*>(base + l.gam), reinterpret_cast<int2*>(base + l.chunks)};
  a.scale = float(1.0 / std::sqrt(double(DK)));
  cudaError_t err = detail::multiprocessors(a.sms);
  if (err == cudaSuccess) err = gdn_detail::launch_plan(a);
  if (err == cudaSuccess) err = gdn_detail::launch_prepare<DK, DV>(a);
  if (err == cudaSuccess) err = gdn_detail::launch_state<DK, DV>(a);
  return err;
}

using GdnLauncher = cudaError_t (*)(GdnArgs, void*);

GdnLauncher pick(int dim_k, int dim_v) {
#define FLIDE_GDN_PICK(DK, DV) \
  if (dim_k == DK && dim_v == DV) return launch_gdn<DK, DV>;
  FLIDE_GDN_SHAPES(FLIDE_GDN_PICK)
#undef FLIDE_GDN_PICK
  return nullptr;
}

}  // namespace

size_t gdn_workspace_bytes(int64_t T, int heads_v) {
  return workspace_layout(std::max<int64_t>(T, 0), std::max(heads_v, 0)).total;
}

cudaError_t gdn_chunked(const bf16* q, const bf16* k, const bf16* v, const float* g,
                        const float* beta, float* state, bf16* out, void* workspace, int heads_k,
                        int heads_v, int dim_k, int dim_v, int level, const TreeMeta& meta,
                        cudaStream_t stream) {
  if (heads_k <= 0 || heads_v <= 0 || heads_v % heads_k != 0 || level < 0)
    return cudaErrorInvalidValue;
  const GdnLauncher launch = pick(dim_k, dim_v);
  if (launch == nullptr) return cudaErrorInvalidValue;
  if (meta.n_tokens == 0 || meta.max_level_nodes == 0) return cudaSuccess;
  if (workspace == nullptr) return cudaErrorInvalidValue;
  GdnArgs a{};
  a.q = q, a.k = k, a.v = v, a.g = g, a.beta = beta, a.state = state, a.out = out;
  a.heads_k = heads_k, a.heads_v = heads_v, a.level = level, a.meta = meta, a.stream = stream;
  return launch(a, workspace);
}

}  // namespace flide::kernels
