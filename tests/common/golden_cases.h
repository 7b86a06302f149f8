// The golden cases written by tools/golden/make_fixtures.py (golden.json beside a checkpoint):
// token ids and HF transformers' float32 logits at the last row and a few others, and the
// one-sequence stream that reads those rows with full-vocabulary logits.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "backend/stream.h"

namespace flide::test {

struct GoldenCase {
  std::vector<int32_t> ids;
  std::vector<int32_t> rows;                // positions whose logits are stored, last row first
  std::vector<std::vector<double>> logits;  // per row
};

inline std::vector<GoldenCase> read_golden(const std::filesystem::path& path) {
  std::ifstream file(path);
  nlohmann::json golden = nlohmann::json::parse(file);
  std::vector<GoldenCase> cases;
  for (const auto& c : golden.at("cases")) {
    GoldenCase g;
    g.ids = c.at("ids").get<std::vector<int32_t>>();
    g.rows.push_back(int32_t(g.ids.size()) - 1);
    g.logits.push_back(c.at("logits_last").get<std::vector<double>>());
    if (c.contains("logits_all_rows")) {
      auto rows = c.at("logits_all_rows").get<std::vector<int32_t>>();
      auto logits = c.at("logits_rows").get<std::vector<std::vector<double>>>();
      for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i] == g.rows[0]) continue;
        g.rows.push_back(rows[i]);
        g.logits.push_back(logits[i]);
      }
    }
    cases.push_back(std::move(g));
  }
  return cases;
}

// One root node holding the case's ids; full-vocabulary logits at the stored rows.
inline Stream single_sequence(const GoldenCase& g) {
  Stream s;
  s.token_ids = g.ids;
  for (int32_t t = 0; t < int32_t(g.ids.size()); ++t) {
    s.positions.push_back(t);
    s.token_node.push_back(0);
  }
  s.nodes.push_back({-1, 0, int32_t(g.ids.size()), 0, -1, -1});
  s.level_begin = {0, 1};
  s.out_rows = g.rows;
  s.n_full_out = int32_t(g.rows.size());
  return s;
}

}  // namespace flide::test
