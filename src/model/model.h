// A loaded model: one forward over a flat stream (backend/stream.h), returning the logits the
// stream's readout asks for. Architectures register a factory keyed by the Hugging Face
// "architectures" string (registry.cpp) that binds its weights from a WeightSource (a
// safetensors checkpoint or random weights of a config's shapes); front ends and the engine see
// only this interface.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
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
  // (StreamBuilder does this). Not thread-safe: one caller per model.
  ReadoutLogits forward(const Stream& stream) {
    submit(stream);
    return collect();
  }
  // The forward in two halves, so that the host can prepare the next round while the device
  // computes this one (the engine loop): submit queues the stream's work (and returns before it
  // is done when the backend is asynchronous()), collect waits for the oldest submitted round
  // and returns its logits. At most two rounds are submitted and not yet collected. wait_tail
  // returns once the newest submitted round's device work is down to its last layers.
  virtual void submit(const Stream& stream) = 0;
  virtual ReadoutLogits collect() = 0;
  virtual void wait_tail() = 0;
  virtual bool asynchronous() const = 0;
  // The Ops::matmul calls forward(stream) makes, in order (benchmarks time them alone: the
  // GEMM-only floor of a round).
  virtual std::vector<GemmShape> gemm_shapes(const Stream& stream) const = 0;
};

// Passes every call on to another model: the base of wrappers that watch or change a few of
// them (flide bench's GEMM recorder).
class ForwardingModel : public Model {
 public:
  explicit ForwardingModel(Model& inner) : inner_(inner) {}
  const ModelInfo& info() const override { return inner_.info(); }
  void submit(const Stream& stream) override { inner_.submit(stream); }
  ReadoutLogits collect() override { return inner_.collect(); }
  void wait_tail() override { inner_.wait_tail(); }
  bool asynchronous() const override { return inner_.asynchronous(); }
  std::vector<GemmShape> gemm_shapes(const Stream& stream) const override {
    return inner_.gemm_shapes(stream);
  }

 protected:
  Model& inner_;
};

// Reads <dir>/config.json, picks the architecture, binds weights from <dir>'s safetensors onto
// `ops` (converted to its compute type). Errors name the file, key or tensor at fault.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Ops& ops);

// The architecture of `config_file` (a config.json anywhere) with random weights of its shapes
// (model/random_weights.h), deterministic in `seed`; the LM head is tied when the config says
// tie_word_embeddings. For benchmarks: values are meaningless, costs are real.
std::unique_ptr<Model> load_model_random(const std::filesystem::path& config_file, Ops& ops,
                                         uint64_t seed);
// The same from a config already parsed (errors name it "the config"). Named apart from the
// path overload because a string converts to both a path and a json.
std::unique_ptr<Model> load_model_random_from_json(const nlohmann::json& config, Ops& ops,
                                                   uint64_t seed);

}  // namespace flide
