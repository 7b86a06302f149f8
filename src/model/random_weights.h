// Synthetic weights of a real checkpoint's shapes, for benchmarks (`flide bench --config`): the
// cost of a forward pass does not depend on the weights' values, so every Qwen3.5 size can be
// measured without downloading it. Values are deterministic functions of (seed, tensor name,
// element index) through a counter-based hash (splitmix64), so any chunk of any tensor is
// generated independently: tensors fill in parallel (OpenMP), the same on any thread count.
//
// Distributions, chosen by name so the forward stays in a sane numeric range:
//   *linear_attn.norm.weight   1 + N(0, 0.1)-ish        (plain weight of the gated RMSNorm)
//   other *norm.weight         N(0, 0.1)-ish            (zero-centred: scaled by 1 + w)
//   *A_log                     log(U(1, 16))
//   *dt_bias                   U(-4, 0.5)
//   *embed_tokens.weight       U with std 0.02          (small, like HF's initializer_range)
//   anything else              U(-a, a), a = sqrt(3 / fan_in), fan_in = numel / shape[0]
//                              (unit variance in, unit variance out; conv1d [C, 1, K]: K)
// "N(0, s)-ish" is the sum of two uniforms (triangular, variance s^2): one hash per value.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/weight_source.h"

namespace flide {

// A synthetic text-only checkpoint (Qwen3_5ForCausalLM layout): every tensor under "model."
// exists with whatever shape the binder asks for (the multimodal "model.language_model." prefix
// does not), and "lm_head.weight" exists unless the embeddings are tied.
class RandomWeights final : public WeightSource {
 public:
  RandomWeights(uint64_t seed, bool tie_word_embeddings)
      : seed_(seed), tie_word_embeddings_(tie_word_embeddings) {}
  bool has(std::string_view name) const override;
  void read_into(std::string_view name, const std::vector<int64_t>& shape,
                 float* dst) const override;

 private:
  uint64_t seed_;
  bool tie_word_embeddings_;
};

// The stream key of tensor `name` under `seed`.
uint64_t random_tensor_key(uint64_t seed, std::string_view name);

// dst[i] = center + half_width * u(key, i) with u uniform in [-1, 1), i in [0, n); parallel,
// and the same values whatever the thread count. Also fills benchmark scratch data.
void fill_uniform(float* dst, int64_t n, uint64_t key, float center, float half_width);

}  // namespace flide
