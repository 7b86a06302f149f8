// A loaded model: one forward over a flat stream (backend/stream.h), returning the logits the
// stream's readout asks for. Architectures register a factory keyed by the Hugging Face
// "architectures" string (registry.cpp) that binds its weights from a WeightSource (a
// safetensors checkpoint or random weights of a config's shapes); front ends and the engine see
// only this interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "backend/stream.h"

namespace flide {

struct ReadoutLogits {
  std::vector<double> selected;  // [M] logit of Stream::select_ids[m] at out row select_out[m]
  std::vector<double> full;      // [F, V] full-vocabulary logits of the first F out rows
};

struct ModelInfo {
  std::string architecture;
  int64_t vocab_size = 0;
  int64_t n_layers = 0;
  int64_t n_params = 0;  // text model parameters actually loaded
  std::vector<int32_t> eos_token_ids;
};

// One matrix product of a forward: out[m, n] = x[m, k] . w[n, k]^T (Ops::matmul).
struct GemmShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // Computes the stream. The stream's nodes must be ordered by level with level_begin filled
  // (StreamBuilder does this). Not thread-safe: one forward at a time per model.
  virtual ReadoutLogits forward(const Stream& stream) = 0;
  // The Ops::matmul calls forward(stream) makes, in order (benchmarks time them alone: the
  // GEMM-only floor of a round).
  virtual std::vector<GemmShape> gemm_shapes(const Stream& stream) const = 0;
};

// Reads <dir>/config.json, picks the architecture, binds weights from <dir>'s safetensors onto
// `ops` (converted to its compute type). Errors name the file, key or tensor at fault.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Ops& ops);

// The architecture of `config_file` (a config.json anywhere) with random weights of its shapes
// (model/random_weights.h), deterministic in `seed`; the LM head is tied when the config says
// tie_word_embeddings. For benchmarks: values are meaningless, costs are real.
std::unique_ptr<Model> load_model_random(const std::filesystem::path& config_file, Ops& ops,
                                         uint64_t seed);

}  // namespace flide
