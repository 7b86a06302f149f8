// Runs decision trees through a model. Forked execution packs every node of every tree into
// one flat stream ordered by level (trunks computed once, children forked from their parents'
// state); independent execution runs each root-to-leaf path as its own sequence, the
// definition of correct output and the in-engine baseline.
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "engine/tree.h"
#include "model/model.h"

namespace flide {

enum class ExecMode : uint8_t { ExecMode_fork, ExecMode_independent };

// Stream rows a tree adds to a round (the packing estimate): its nodes once when forked, its
// root-to-leaf paths when independent.
int64_t stream_tokens(const Tree& tree, ExecMode mode);

// How trees become rounds (the scheduler's knobs).
struct RoundPolicy {
  // Trees are packed in order into rounds of at most this many stream rows, split at tree
  // boundaries (a larger tree runs alone); 0 puts every tree of a run into one round.
  int64_t max_round_tokens = 0;
  // Pad each round at its tail to its capacity bucket (engine/round_capacity.h) so that a
  // backend with CUDA graphs replays one graph per bucket. Rounds over max_bucket_tokens, and
  // rounds with full-vocabulary readouts, run unpadded (the graph-free path): a graph saves the
  // launches of a round's few hundred ops, which a round of thousands of rows hides behind its
  // GPU time anyway, while its bucket pads it by up to 6.25%. On the H200 (0.8B) graphs win up
  // to ~6,000 rows and lose from ~10,000 (bench/results/2026-11-30-gemm-tuning-graphs.md).
  bool pad_to_buckets = false;
  int32_t max_bucket_tokens = 8192;
};

struct RunStats {
  int64_t tokens_computed = 0;  // stream rows over all rounds, padding excluded
  int64_t tokens_padding = 0;   // padding rows over all rounds
  int64_t rounds = 0;
};

class Executor {
 public:
  explicit Executor(Model& model, RoundPolicy policy = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Validates every tree first, then runs them in rounds per the policy. Results align with
  // `trees` and do not depend on how the trees were packed (the visibility rule).
  std::vector<TreeResult> run(const std::vector<Tree>& trees, ExecMode mode,
                              RunStats* stats = nullptr);

  // Rounds in flight (the engine loop, which prepares the next round while the device computes
  // this one): submit validates `trees` and queues them on the model as one round (padded per
  // the policy, never split by it) and returns once it is queued; collect waits for the oldest
  // submitted round and returns the results of its trees, in order. The trees are read until
  // their round is collected, so they must live that long. At most two rounds are submitted and
  // not collected (Model::submit); run needs none. wait_tail and asynchronous: Model's.
  void submit(std::vector<const Tree*> trees, ExecMode mode);
  std::vector<TreeResult> collect(RunStats* stats = nullptr);
  void wait_tail() { model_.wait_tail(); }
  bool asynchronous() const { return model_.asynchronous(); }

 private:
  struct Round;  // a submitted round: its trees and where their readouts land

  void submit_valid(std::vector<const Tree*> trees, ExecMode mode);  // trees validated

  Model& model_;
  RoundPolicy policy_;
  std::deque<std::unique_ptr<Round>> in_flight_;  // oldest first
};

}  // namespace flide
