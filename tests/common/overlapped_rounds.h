// Rounds in flight as the engine loop runs them (server/http/engine_loop.h): each round is
// submitted once the one before has reached its tail, and only then is the one before
// collected, so two rounds share the device and the backend's buffers. Every suite that runs
// it requires the answers of rounds run one by one.
#pragma once

#include <vector>

#include "engine/executor.h"

namespace flide::test {

// Executor::submit's view of a round's trees.
inline std::vector<const Tree*> tree_ptrs(const std::vector<Tree>& trees) {
  std::vector<const Tree*> out;
  for (const Tree& tree : trees) out.push_back(&tree);
  return out;
}

inline std::vector<std::vector<TreeResult>> run_overlapped(
    Executor& exec, const std::vector<std::vector<Tree>>& rounds, ExecMode mode) {
  std::vector<std::vector<TreeResult>> results;
  for (size_t r = 0; r < rounds.size(); ++r) {
    if (r > 0) exec.wait_tail();
    exec.submit(tree_ptrs(rounds[r]), mode);
    if (r > 0) results.push_back(exec.collect());
  }
  if (!rounds.empty()) results.push_back(exec.collect());
  return results;
}

}  // namespace flide::test
