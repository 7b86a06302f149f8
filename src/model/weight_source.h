// Where a model's weights come from. The architecture files bind tensors by checkpoint name and
// shape from a WeightSource, so one binding serves a real checkpoint (SafetensorsWeights) and a
// synthetic one of the same shapes (RandomWeights, random_weights.h: benchmarks of every model
// size without downloading it).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/safetensors.h"

namespace flide {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(std::string_view name) const = 0;
  // Writes tensor `name` as float32 into dst[numel(shape)], row-major in the checkpoint's
  // layout. Error (flide::Error) naming the tensor when it is absent or its shape differs.
  virtual void read_into(std::string_view name, const std::vector<int64_t>& shape,
                         float* dst) const = 0;
  // The same into a new vector.
  std::vector<float> read_f32(std::string_view name, const std::vector<int64_t>& shape) const;
};

// Product of the dimensions (1 for a scalar shape {}).
int64_t numel(const std::vector<int64_t>& shape);

// A loaded safetensors checkpoint (core/safetensors.h) as a WeightSource; bf16/f16/f32 widen
// to float exactly, f64 is narrowed.
class SafetensorsWeights final : public WeightSource {
 public:
  explicit SafetensorsWeights(const SafetensorsStore& store) : store_(store) {}
  bool has(std::string_view name) const override { return store_.has(name); }
  void read_into(std::string_view name, const std::vector<int64_t>& shape,
                 float* dst) const override;

 private:
  const SafetensorsStore& store_;
};

}  // namespace flide
