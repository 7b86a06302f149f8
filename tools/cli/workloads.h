// The requests `flide bench` times. Synthetic workloads have the fixed shapes of the datasets'
// typical requests (random token ids: the cost of a forward does not depend on them):
//   race_all     trunk 450 + 4 questions x 50 tokens, 4 labels each  (RACE: all questions)
//   race_one     trunk 450 + 1 x 50, 4 labels                        (RACE: one question)
//   quality_all  trunk 5,000 + 18 x 70, 4 labels                     (QuALITY: all questions)
//   quality_one  trunk 5,000 + 1 x 70, 4 labels
//   multirc_all  trunk 330 + 58 x 35, 2 labels                       (MultiRC: all answers)
// A FILE.jsonl workload is the file's request lines, read like `flide decide` input (text
// through the decision template with a tokenizer, or token ids): a round of N takes its first N
// (starting over after the last), so rounds of real requests of different sizes can be timed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/tree.h"

namespace flide::cli {

struct SyntheticShape {
  const char* name;
  int32_t trunk_tokens;
  int32_t questions;
  int32_t question_tokens;
  int32_t labels;  // label token ids read at each question's last token
};

// A --workload value, checked before any model is loaded.
struct WorkloadSpec {
  std::optional<SyntheticShape> synthetic;  // set for a named workload
  std::filesystem::path file;               // otherwise: the JSONL file (exists)
};

// Error naming the workloads when `name` is neither a synthetic workload nor a readable file.
WorkloadSpec parse_workload(const std::string& name);

// One round of `flide bench`: its requests' trees, what it is, and its sizes, all requests
// together.
struct BenchRound {
  std::string description;  // "race_all", "FILE (request ID)" or "FILE (N requests from ID)"
  std::vector<Tree> trees;
  int64_t trunk_tokens = 0;
  int64_t branch_tokens = 0;  // all questions' own tokens
  int64_t questions = 0;
};

// A round of `batch` requests. Synthetic ones draw ids from [0, min(vocab_size, 200000)),
// request i by seed + i. A file's text requests need the tokenizer at `tokenizer_json` (absent:
// Error saying so).
BenchRound make_round(const WorkloadSpec& spec, int64_t batch, int64_t vocab_size, uint64_t seed,
                      const std::optional<std::filesystem::path>& tokenizer_json);

}  // namespace flide::cli
