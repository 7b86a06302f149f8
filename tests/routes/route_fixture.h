// Shared by the route tests: the shipped model's tokenizer, a RouteContext over it, synthetic
// engine results (no model needed: respond() only reads NodeResult::probs) and a helper that
// runs a body and returns the ApiError it was refused with.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "server/routes/route_context.h"
#include "tokenizer/tokenizer.h"

namespace flide::server::test {

using json = nlohmann::ordered_json;

inline const Tokenizer& tiny_tokenizer() {
  // Loading tokenizer.json dominates these tests: once per binary.
  static const std::unique_ptr<Tokenizer> tokenizer = std::make_unique<Tokenizer>(
      Tokenizer::load(std::string(FLIDE_SOURCE_DIR) + "/models/flide-tiny-random/tokenizer.json"));
  return *tokenizer;
}

inline RouteContext context(RouteLimits limits = {}) {
  const Tokenizer& tokenizer = tiny_tokenizer();
  return RouteContext{tokenizer, "flide-tiny-random", tokenizer.vocab_size(), limits, {}};
}

// The conformance suite's fixture (decision_api.md §1.6).
inline json systemone_fixture() {
  return json::parse(R"({
    "model": "jev-latest",
    "state": "I was charged twice for my order last week and nobody has replied.",
    "questions": {
      "route": {"type": "choice", "instructions": "Which team should handle this?",
                "criteria": {"billing": "payments and refunds", "shipping": null,
                             "technical": null}},
      "urgency": {"type": "score", "instructions": "How urgent is it?",
                  "criteria": ["can wait", "this week", "today", "right now"]},
      "angry": {"type": "noul", "instructions": "The customer is angry."}
    }
  })");
}

// A body as the openai SDK sends it for client.decisions.create({...}).
inline json decisions_fixture() {
  return json::parse(R"({
    "model": "flide-tiny-random",
    "input": "The parcel arrived with a cracked screen.",
    "questions": [
      {"type": "predicate", "name": "damaged", "instructions": "The item is damaged."},
      {"type": "choice", "name": "department", "instructions": "Which team handles it?",
       "choices": [{"value": "returns", "description": "refunds and exchanges"},
                   {"value": true}, {"value": "true", "description": "the string"}]},
      {"type": "score", "instructions": "How severe is it?",
       "levels": [{"label": "cosmetic"}, {"label": "broken", "description": "unusable"}]}
    ]
  })");
}

// One random distribution per question node (Dirichlet(1) over its labels), as the engine's
// softmax would give; the trunk has no readout.
inline TreeResult synthetic_result(const Tree& tree, uint32_t seed) {
  std::mt19937 rng(seed);
  std::exponential_distribution<double> draw(1.0);
  TreeResult result;
  result.nodes.resize(tree.nodes.size());
  for (size_t n = 1; n < tree.nodes.size(); ++n) {
    std::vector<double>& p = result.nodes[n].probs;
    double sum = 0.0;
    for (size_t i = 0; i < tree.nodes[n].label_ids.size(); ++i) sum += p.emplace_back(draw(rng));
    for (double& x : p) x /= sum;
  }
  return result;
}

// The ApiError `run` throws, or nullopt (with a test failure) if it throws none.
inline std::optional<ApiError> refusal(const std::function<void()>& run) {
  try {
    run();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted, expected a refusal";
  return std::nullopt;
}

}  // namespace flide::server::test
