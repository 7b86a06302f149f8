// Decision prompts: the OpenJev template (shared/specs/decision_api.md §1.4) that turns a state
// and questions into token trees. The state is rendered once in the trunk; each question's
// text, lettered options and answer cue go in its branch. The trunk/branch boundary is the
// longest common token prefix of the questions' full prompts and of the rendered state prefix
// "<|im_start|>user\nState:\n{state}\n\n" (capped so every branch keeps at least one token), so
// every branch's path equals the tokenization of its whole prompt, and requests with the same
// state split at the same token.
// Shared by the CLI and the server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tree.h"
#include "tokenizer/tokenizer.h"

namespace flide {

enum class QuestionType : uint8_t { QuestionType_choice, QuestionType_score, QuestionType_noul };
constexpr QuestionType kQuestionTypes[] = {QuestionType::QuestionType_choice,
                                           QuestionType::QuestionType_score,
                                           QuestionType::QuestionType_noul};

// System One's name of a type ("choice", "score", "noul"), also the calibration table's.
const char* question_type_name(QuestionType type);

struct DecisionOption {
  std::string key;          // choice: the caller's key; score: "0".."N-1"; noul: "yes"/"no"
  std::string description;  // rendered after "key: " ("" for a null description)
};

struct DecisionQuestion {
  QuestionType type = QuestionType::QuestionType_choice;
  std::string instructions;             // the question text
  std::vector<DecisionOption> options;  // choice: >= 1; score: 2..10 levels; noul: yes, no
};

constexpr int kMaxOptions = 52;  // one single-token letter each: A-Z then a-z

// The letter of option i (A..Z, a..z).
char option_label(int index);

// The user message content of one question (state_text already rendered as text).
std::string render_question_content(const std::string& state_text, const DecisionQuestion& q);

// The full chat prompt: ChatML user turn + generation prompt with an empty think block.
std::string render_question_prompt(const std::string& state_text, const DecisionQuestion& q);

class DecisionCalibration;  // engine/decision_calibration.h

// Tokenizes every question's full prompt (on all cores when they are long) and forms the tree:
// trunk = longest common token prefix, one child per question with a choice readout over its
// option letters, at the temperature (and, for noul, the bias on yes) of `calibration`; none
// given, T = 1. Errors (flide::Error) name the question index: no options, more than
// kMaxOptions, a label that is not one token when appended to the prompt.
Tree build_decision_tree(const Tokenizer& tokenizer, const std::string& state_text,
                         const std::vector<DecisionQuestion>& questions,
                         const DecisionCalibration* calibration = nullptr);

}  // namespace flide
