// The pre-tokenizer flide reads: zero or more Split(regex, Isolated) steps, then ByteLevel
// (optional prefix space, optional GPT-2 regex, then the byte -> alphabet mapping). Qwen2 and
// Qwen3.5 use Split(their regex) + ByteLevel(use_regex=false); GPT-2 style files use a bare
// ByteLevel(use_regex=true).
#pragma once

#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace flide::tok {

// HF's ByteLevel::use_regex pattern (GPT-2).
inline constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Pretokenizer {
  std::vector<Regex> splits;              // Split steps, applied in file order
  bool add_prefix_space = false;          // ByteLevel: ' ' before each piece not starting with one
  std::optional<Regex> byte_level_regex;  // ByteLevel use_regex

  // Calls on_word with each pre-token of `text` (valid UTF-8), already in the ByteLevel alphabet.
  void run(std::string_view text, const std::function<void(std::string_view)>& on_word) const;

  // One Split step, no prefix space, no ByteLevel regex (Qwen2, Qwen3.5): a text's pre-tokens
  // are then its Split pieces, so it can be pre-tokenized in two parts (run_final, run_rest).
  bool single_split() const { return splits.size() == 1 && !add_prefix_space && !byte_level_regex; }
  // For single_split(): on_word for each pre-token of `text` that no appended text can change
  // (Regex::final_split); returns where they end.
  size_t run_final(std::string_view text,
                   const std::function<void(std::string_view)>& on_word) const;
  // For single_split(): run's pre-tokens of text[from, end), where `from` is what run_final
  // returned on a prefix of text (text[0, from) stays the lookbehind context).
  void run_rest(std::string_view text, size_t from,
                const std::function<void(std::string_view)>& on_word) const;

 private:
  void emit(std::string_view text, const std::vector<std::pair<size_t, size_t>>& pieces,
            const std::function<void(std::string_view)>& on_word) const;
  void run_from(size_t step, std::string_view text, std::string& word,
                const std::function<void(std::string_view)>& on_word) const;
};

}  // namespace flide::tok
