// From one question's option probabilities to the numbers both routes report
// (decision_api.md §1.3, "Answer shaping" and "Confidence"): Jev's published formulas, which
// llama.cpp pins and the conformance tests recompute from the returned probabilities (±1e-6).
#pragma once

#include <cstddef>
#include <vector>

#include "engine/tree.h"

namespace flide::server {

// The question's distribution: node question + 1 of a tree from build_decision_tree, one
// probability per option in option order. FLIDE_CHECKs the result's shape and that every
// probability is finite (engine or model faults: the request fails rather than answer null).
const std::vector<double>& question_probs(const TreeResult& result, size_t question,
                                          size_t n_options);

// Index of the largest probability; ties go to the first option (max_element, as everywhere).
size_t argmax(const std::vector<double>& p);

// Choice: (N·p_max − 1) / (N − 1), floored at 0; 1 for a single option.
double choice_confidence(const std::vector<double>& p);

// Score: 1 − d / d_u floored at 0, with d = Σ p_i·|i − m| around the mode m and d_u the same
// spread for the uniform distribution around the middle level; 1 below two levels.
double score_confidence(const std::vector<double>& p);

// Score: Σ i·p_i, in [0, N − 1].
double expected_level(const std::vector<double>& p);

}  // namespace flide::server
