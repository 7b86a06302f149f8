// Request bodies the server tests send, and Jev's confidence formulas to recompute answers
// with (shared/specs/decision_api.md §1.3).
#pragma once

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace flide::test {

using ordered_json = nlohmann::ordered_json;

// llama.cpp's System One fixture: one question of each type.
inline ordered_json systemone_body() {
  return ordered_json::parse(R"({
    "state": "I was charged twice for my order last week and nobody has replied.",
    "questions": {
      "route": {"type": "choice", "instructions": "Which team should handle this?",
                "criteria": {"billing": "payments and refunds", "shipping": null,
                             "technical": null}},
      "urgency": {"type": "score", "instructions": "How urgent is this?",
                  "criteria": ["can wait", "this week", "today", "right now"]},
      "angry": {"type": "noul", "instructions": "The customer is angry."}
    }
  })");
}

// The same questions in OpenAI's format, with a typed (boolean) choice value.
inline ordered_json decisions_body(const std::string& model) {
  ordered_json body = ordered_json::parse(R"({
    "input": "My package arrived crushed and the lamp inside is broken.",
    "questions": [
      {"type": "predicate", "name": "damaged", "instructions": "Is the item damaged?"},
      {"type": "choice", "name": "department", "instructions": "Which department?",
       "choices": [{"value": "returns", "description": "refunds and replacements"},
                   {"value": "billing"}, {"value": true}]},
      {"type": "score", "instructions": "How severe is the damage?",
       "levels": [{"label": "cosmetic"}, {"label": "broken", "description": "unusable"},
                  {"label": "dangerous"}]}
    ]
  })");
  body["model"] = model;
  return body;
}

// A state of about `words` tokens' worth of text: enough to keep the engine busy for a while.
inline std::string long_state(int words) {
  std::string text;
  for (int w = 0; w < words; ++w) text += "word" + std::to_string(w % 97) + " ";
  return text;
}

// One question on a state of ~2,500 tokens: about a second of the tiny model on one thread.
inline ordered_json heavy_body() {
  ordered_json body;
  body["state"] = long_state(600);
  body["questions"]["busy"] = {{"type", "noul"}, {"instructions", "Is the engine busy?"}};
  return body;
}

inline double choice_confidence(const std::vector<double>& p) {
  const double n = double(p.size());
  if (p.size() < 2) return 1.0;
  return std::max(0.0, (n * *std::max_element(p.begin(), p.end()) - 1) / (n - 1));
}

inline double score_confidence(const std::vector<double>& p) {
  const size_t n = p.size();
  if (n < 2) return 1.0;
  const size_t mode = size_t(std::max_element(p.begin(), p.end()) - p.begin());
  double d = 0, d_uniform = 0;
  for (size_t i = 0; i < n; ++i) {
    d += p[i] * std::abs(double(i) - double(mode));
    d_uniform += std::abs(double(i) - double(n - 1) / 2) / double(n);
  }
  return std::max(0.0, 1 - d / d_uniform);
}

}  // namespace flide::test
