// Bucket ladder, tail padding and round packing (round_capacity.h).
#include "engine/round_capacity.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace flide {

namespace {

constexpr int32_t kMinTokens = 64;
// Padding costs GEMM time in proportion (6% of a 6,000-token round was 2 ms on the H200 with
// 8 steps, more than the launch gaps a graph saves there); 16 steps cap it at 6.25%.
constexpr int32_t kStepsPerDoubling = 16;

int32_t pow2_at_least(int32_t n) {
  return int32_t(std::bit_ceil(uint32_t(std::max(n, 1))));
}

}  // namespace

int32_t token_bucket(int32_t tokens) {
  if (tokens <= kMinTokens) return kMinTokens;
  const int32_t step = int32_t(std::bit_floor(uint32_t(tokens))) / kStepsPerDoubling;
  return (tokens + step - 1) / step * step;
}

std::optional<RoundCapacity> capacity_for(const Stream& s, int32_t max_tokens) {
  if (s.n_full_out > 0 || s.padded()) return std::nullopt;
  const int32_t tokens = token_bucket(s.n_tokens());
  if (tokens > max_tokens) return std::nullopt;
  RoundCapacity cap;
  cap.tokens = tokens;
  cap.nodes = pow2_at_least(int32_t(s.nodes.size()));
  cap.levels = s.n_levels();
  cap.slots = pow2_at_least(s.n_slots);
  cap.out_rows = pow2_at_least(int32_t(s.out_rows.size()));
  cap.selects = pow2_at_least(int32_t(s.select_ids.size()));
  return cap;
}

Stream pad_stream(const Stream& s, const RoundCapacity& cap) {
  const int32_t T = s.n_tokens(), R = int32_t(s.out_rows.size());
  const int32_t M = int32_t(s.select_ids.size());
  FLIDE_CHECK(!s.padded() && s.n_full_out == 0 && cap.tokens >= T &&
                  cap.nodes >= int32_t(s.nodes.size()) && cap.levels == s.n_levels() &&
                  cap.slots >= s.n_slots && cap.out_rows >= R && cap.selects >= M,
              "the round does not fit its capacity");
  Stream p = s;
  p.token_ids.resize(size_t(cap.tokens), 0);
  p.positions.resize(size_t(cap.tokens), 0);
  p.token_node.resize(size_t(cap.tokens), -1);
  p.n_slots = cap.slots;
  p.out_rows.resize(size_t(cap.out_rows), 0);
  p.select_out.resize(size_t(cap.selects), 0);
  p.select_ids.resize(size_t(cap.selects), 0);
  p.pad_tokens = cap.tokens - T;
  p.pad_out = cap.out_rows - R;
  p.pad_select = cap.selects - M;
  p.node_capacity = cap.nodes;
  return p;
}

std::vector<std::vector<int32_t>> pack_rounds(const std::vector<int64_t>& tokens,
                                              int64_t max_tokens) {
  std::vector<std::vector<int32_t>> rounds;
  int64_t used = 0;
  for (int32_t i = 0; i < int32_t(tokens.size()); ++i) {
    if (rounds.empty() || used + tokens[i] > max_tokens) {
      rounds.emplace_back();
      used = 0;
    }
    rounds.back().push_back(i);
    used += tokens[i];
  }
  return rounds;
}

}  // namespace flide
