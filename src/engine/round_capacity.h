// Capacity buckets for rounds (DESIGN.md "A round is a flat stream"): a round is padded at its
// tail up to the bucket its sizes fall in, so that every round of a bucket has the same shapes
// and a backend with CUDA graphs captures one graph per bucket and replays it. Buckets step by
// 1/16 of a power of two in tokens (at most 6.25% padding, 64 tokens at least) and by powers of
// two in nodes, slots, out rows and select entries; the level count is kept as is.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backend/stream.h"

namespace flide {

struct RoundCapacity {
  int32_t tokens = 0;
  int32_t nodes = 0;
  int32_t levels = 0;
  int32_t slots = 0;
  int32_t out_rows = 0;
  int32_t selects = 0;
  bool operator==(const RoundCapacity&) const = default;
};

// The smallest token bucket holding `tokens` rows.
int32_t token_bucket(int32_t tokens);

// The bucket of a round, or nothing when it has none: more than max_tokens rows after rounding
// (the graph-free path) or full-vocabulary readout rows (those rounds run as they are).
std::optional<RoundCapacity> capacity_for(const Stream& s, int32_t max_tokens);

// The round padded to `cap` (which must hold it): the same rows, nodes and readouts first, then
// padding as Stream documents it. Readout results of the real entries keep their indices.
Stream pad_stream(const Stream& s, const RoundCapacity& cap);

// Splits work items of the given token counts, in order, into rounds of at most max_tokens
// tokens each (an item larger than that gets a round of its own). Returns each round's items.
std::vector<std::vector<int32_t>> pack_rounds(const std::vector<int64_t>& tokens,
                                              int64_t max_tokens);

}  // namespace flide
