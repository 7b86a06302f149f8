// Qwen3.5 dense text model (hybrid Gated DeltaNet + gated attention): factory for the registry.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "model/model.h"
#include "model/weight_source.h"

namespace flide {

// `config` is the parsed config.json (flat or multimodal layout, model/config.h).
std::unique_ptr<Model> load_qwen3_5(const nlohmann::json& config, const WeightSource& weights,
                                    Ops& ops);

}  // namespace flide
