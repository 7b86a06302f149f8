// Runs decision trees through a model. Forked execution packs every node of every tree into
// one flat stream ordered by level (trunks computed once, children forked from their parents'
// state); independent execution runs each root-to-leaf path as its own sequence, the
// definition of correct output and the in-engine baseline.
#pragma once

#include <vector>

#include "engine/tree.h"
#include "model/model.h"

namespace flide {

enum class ExecMode : uint8_t { ExecMode_fork, ExecMode_independent };

struct RunStats {
  int64_t tokens_computed = 0;  // stream rows over all rounds
};

class Executor {
 public:
  explicit Executor(Model& model) : model_(model) {}
  // All trees in one round per mode (validated first). Results align with `trees`.
  std::vector<TreeResult> run(const std::vector<Tree>& trees, ExecMode mode,
                              RunStats* stats = nullptr);

 private:
  Model& model_;
};

}  // namespace flide
