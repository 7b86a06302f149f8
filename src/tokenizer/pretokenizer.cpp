// Pre-tokenizer steps behind pretokenizer.h, in HF's order: each step splits every piece the
// previous one produced.
#include "tokenizer/pretokenizer.h"

#include <string>

#include "tokenizer/byte_level.h"

namespace flide::tok {

void Pretokenizer::run(std::string_view text,
                       const std::function<void(std::string_view)>& on_word) const {
  std::string word;  // reused buffer for the alphabet form of each pre-token
  run_from(0, text, word, on_word);
}

void Pretokenizer::run_range(std::string_view text, size_t from, size_t to,
                             const std::function<void(std::string_view)>& on_word) const {
  std::string word;
  for (auto [begin, end] : splits[0].split_isolated(text, from)) {
    if (end > to) break;
    word.clear();
    byte_level_encode(text.substr(begin, end - begin), word);
    on_word(word);
  }
}

void Pretokenizer::run_from(size_t step, std::string_view text, std::string& word,
                            const std::function<void(std::string_view)>& on_word) const {
  if (text.empty()) return;
  if (step < splits.size()) {
    for (auto [begin, end] : splits[step].split_isolated(text))
      run_from(step + 1, text.substr(begin, end - begin), word, on_word);
    return;
  }
  std::string prefixed;
  if (add_prefix_space && text.front() != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.append(1, ' ').append(text);
    text = prefixed;
  }
  auto emit = [&](std::string_view piece) {
    word.clear();
    byte_level_encode(piece, word);
    on_word(word);
  };
  if (!byte_level_regex) {
    emit(text);
    return;
  }
  for (auto [begin, end] : byte_level_regex->split_isolated(text))
    emit(text.substr(begin, end - begin));
}

}  // namespace flide::tok
