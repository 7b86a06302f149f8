// The serving warm-up (flide serve --warmup): before a server says it is ready, it runs rounds
// of synthetic decision requests, as vLLM's start-up profile run and llama.cpp's warm-up run do,
// so that its first clients do not pay for what a backend does on first use: on CUDA, loading
// kernel modules and cuBLASLt's kernels, growing the scratch arena and workspaces to a full
// round's size (growing mid-round drains the device and merges blocks after it), capturing a
// graph. A full round also shows at start-up, not at the first large request, whether a round
// of the configured size (of this shape) fits in device memory. The requests are random token
// ids (the model's cost does not depend on their values) shaped like a decision request: a
// context of up to 4,096 tokens and 16 questions of 32 tokens, each with a 4-option choice
// readout.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/executor.h"

namespace flide {

struct WarmupShape {
  int64_t round_tokens = 0;  // stream rows of the full round to warm (>= 1)
  int64_t max_context = 0;   // one question's whole prompt may not exceed this (0: no limit)
  int64_t vocab_size = 0;
};

// Synthetic trees of about `rows` stream rows in all under `mode` (fewer by 10% or 16 at most;
// when `rows` is less than a trunk token and a question, one such tree): as few trees as keep
// every context within 4,096 tokens and max_context. Deterministic.
std::vector<Tree> warmup_trees(const WarmupShape& shape, ExecMode mode, int64_t rows);

struct WarmupReport {
  int64_t full_round_rows = 0;   // rows of the full round (padding excluded)
  int64_t small_round_rows = 0;  // rows of the small round, run twice (eager, then graphed)
  double seconds = 0;
};

// Runs one full round of shape.round_tokens rows, then a small one-tree round twice (a backend
// with graphs runs a bucket eagerly first and captures it the next time), through its own
// Executor on `model` under `policy`. Answers nothing and leaves nothing behind but warm caches:
// every later round computes the bits it would have computed without it.
WarmupReport warm_up(Model& model, const RoundPolicy& policy, ExecMode mode,
                     const WarmupShape& shape);

}  // namespace flide
