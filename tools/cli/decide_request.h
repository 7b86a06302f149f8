// One line of `flide decide` input, validated and turned into a token tree. Two shapes:
//   text:      {"id", "context", "questions": [{"id", "question", "options": [str...], "answer"}]}
//              (the data/README.md multiple-choice schema; each question becomes an OpenJev
//              choice question whose options have key = option text and an empty description)
//   token ids: {"id", "context_ids": [int...], "questions": [{"id", "ids": [int...],
//              "label_ids": [int...], "answer"}]}  (no tokenizer: trunk = context_ids, one child
//              per question with a choice readout over label_ids)
// "id"s are optional (string or integer, echoed back; null when absent), "answer" is optional
// (null or an index into the options / label ids), unknown keys are ignored. Errors are
// flide::Error whose message starts with the field at fault, e.g.
// `"questions"[2].options: 53 options, at most 52 are supported`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/decision_prompt.h"
#include "engine/tree.h"
#include "tokenizer/tokenizer.h"

namespace flide::cli {

struct DecideQuestion {
  nlohmann::ordered_json id;  // echoed; null when absent
  std::optional<int> answer;  // gold option index, when labelled
};

struct DecideRequest {
  nlohmann::ordered_json id;  // echoed; null when absent
  std::vector<DecideQuestion> questions;
  bool is_text = false;
  // text requests
  std::string context;
  std::vector<DecisionQuestion> prompts;  // [questions]
  // token-id requests: the finished tree
  Tree tree;
};

// `vocab_size` bounds the ids of token-id requests.
DecideRequest parse_decide_request(const nlohmann::ordered_json& line, int64_t vocab_size);

// The request's tree (text requests are tokenized here, their choice readouts at the
// calibration's temperature; `tokenizer` may be null for id requests, which stay at T = 1).
Tree decide_tree(const DecideRequest& request, const Tokenizer* tokenizer,
                 const DecisionCalibration& calibration);

}  // namespace flide::cli
