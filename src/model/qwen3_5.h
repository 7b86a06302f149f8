// Qwen3.5 dense text model (hybrid Gated DeltaNet + gated attention): factory for the registry.
#pragma once

#include <filesystem>
#include <memory>

#include "model/model.h"

namespace flide {

std::unique_ptr<Model> load_qwen3_5(const std::filesystem::path& dir, Ops& ops);

}  // namespace flide
