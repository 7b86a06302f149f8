// Synthetic weights (see random_weights.h). Element i of a tensor takes its randomness from
// splitmix64 at counter i / 2 of the tensor's key (uniforms: the low and high 32 bits feed
// elements 2j and 2j + 1) or at counter i (triangular: both halves feed one element), so the
// values never depend on how the work is split. One hash yields two floats: generation runs at
// memory speed rather than hash speed.
#include "model/random_weights.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace flide {

namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // splitmix64's increment
constexpr int64_t kChunk = int64_t(1) << 16;        // elements per parallel task (even)
constexpr float kInv31 = 1.0f / 2147483648.0f;      // 2^-31: int32 -> [-1, 1)

inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t hash_at(uint64_t key, int64_t counter) {
  return mix64(key + uint64_t(counter + 1) * kGamma);
}

inline float unit(uint32_t bits) {
  return float(int32_t(bits)) * kInv31;
}  // [-1, 1)

// dst[i] = center + sigma * t(key, i), t triangular with unit variance (the sum of two
// uniforms on [-1, 1) has variance 2/3).
void fill_triangular(float* dst, int64_t n, uint64_t key, float center, float sigma) {
  const float scale = sigma * std::sqrt(1.5f);
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = hash_at(key, i);
    dst[i] = center + scale * (unit(uint32_t(h)) + unit(uint32_t(h >> 32)));
  }
}

}  // namespace

uint64_t random_tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name, then mixed with the seed
  for (char c : name) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed + kGamma));
}

void fill_uniform(float* dst, int64_t n, uint64_t key, float center, float half_width) {
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    const int64_t pairs_end = begin + (end - begin) / 2 * 2;
    for (int64_t i = begin; i < pairs_end; i += 2) {
      const uint64_t h = hash_at(key, i / 2);
      dst[i] = center + half_width * unit(uint32_t(h));
      dst[i + 1] = center + half_width * unit(uint32_t(h >> 32));
    }
    if (pairs_end < end)  // odd tail: the low half of its pair's hash
      dst[pairs_end] = center + half_width * unit(uint32_t(hash_at(key, pairs_end / 2)));
  }
}

bool RandomWeights::has(std::string_view name) const {
  if (name == "lm_head.weight") return !tie_word_embeddings_;
  return name.starts_with("model.") && !name.starts_with("model.language_model.");
}

void RandomWeights::read_into(std::string_view name, const std::vector<int64_t>& shape,
                              float* dst) const {
  if (!has(name)) throw Error(cat("tensor ", name, " not found in the random-weight model"));
  for (int64_t d : shape) FLIDE_CHECK(d > 0, "tensor ", name, ": non-positive dimension ", d);
  const int64_t n = numel(shape);
  const uint64_t key = random_tensor_key(seed_, name);
  if (name.ends_with("linear_attn.norm.weight")) {
    fill_triangular(dst, n, key, 1.0f, 0.1f);
  } else if (name.ends_with("norm.weight")) {
    fill_triangular(dst, n, key, 0.0f, 0.1f);
  } else if (name.ends_with("A_log")) {
    fill_uniform(dst, n, key, 8.5f, 7.5f);  // U(1, 16)
    for (int64_t i = 0; i < n; ++i) dst[i] = std::log(dst[i]);
  } else if (name.ends_with("dt_bias")) {
    fill_uniform(dst, n, key, -1.75f, 2.25f);  // U(-4, 0.5)
  } else if (name.ends_with("embed_tokens.weight")) {
    fill_uniform(dst, n, key, 0.0f, 0.02f * std::sqrt(3.0f));  // std 0.02
  } else {
    const int64_t fan_in = shape.empty() ? 1 : n / shape[0];
    fill_uniform(dst, n, key, 0.0f, float(std::sqrt(3.0 / double(fan_in))));
  }
}

}  // namespace flide
