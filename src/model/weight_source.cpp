// WeightSource helpers and the safetensors adapter (see weight_source.h).
#include "model/weight_source.h"

#include <algorithm>

namespace flide {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> WeightSource::read_f32(std::string_view name,
                                          const std::vector<int64_t>& shape) const {
  std::vector<float> out(size_t(numel(shape)));
  read_into(name, shape, out.data());
  return out;
}

void SafetensorsWeights::read_into(std::string_view name, const std::vector<int64_t>& shape,
                                   float* dst) const {
  // The store validates the shape and converts; the copy costs little next to paging the
  // mapping in.
  const std::vector<float> values = store_.read_f32(name, shape);
  std::copy(values.begin(), values.end(), dst);
}

}  // namespace flide
