// The decision requests `flide bench-serve` sends, as text (an HTTP server takes text): a
// synthetic workload of workloads.h's shapes, written in pseudo-words whose length in tokens is
// measured once on the server's /tokenize (trunk ~N tokens, Q questions of ~M tokens with 4 or
// 2 options), or the text requests of a `flide decide` FILE.jsonl. Each replicate's state
// starts with a unique tag, so that no two replicates share a trunk.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "workloads.h"

namespace flide::cli {

enum class ServeRoute : uint8_t { ServeRoute_systemone, ServeRoute_decisions };

struct TextQuestion {
  std::string instructions;
  std::vector<std::string> options;  // distinct
};

struct TextRequest {
  std::string state;
  std::vector<TextQuestion> questions;
};

// Pseudo-word text of `words` words drawn by `seed` (the calibration sample uses it too).
std::string pseudo_text(int64_t words, uint64_t seed);

// The workload's requests. Synthetic ones use `tokens_per_word` (measured on /tokenize) to hit
// their token counts; a file's lines must be text requests with distinct options.
std::vector<TextRequest> serve_requests(const WorkloadSpec& spec, double tokens_per_word,
                                        uint64_t seed);

// The JSON body of `request` for `route`, its state prefixed with "[`tag`] ".
std::string request_body(const TextRequest& request, const std::string& tag, ServeRoute route,
                         const std::string& model);

// Each question's probabilities, in option order, read from a 200 response of `route`
// (Error when the response does not have the expected shape).
std::vector<std::vector<double>> answer_probabilities(const nlohmann::json& response,
                                                      const TextRequest& request, ServeRoute route);

}  // namespace flide::cli
