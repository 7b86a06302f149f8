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

size_t Pretokenizer::run_final(std::string_view text,
                               const std::function<void(std::string_view)>& on_word) const {
  const std::vector<std::pair<size_t, size_t>> pieces = splits[0].final_split(text);
  emit(text, pieces, on_word);
  return pieces.empty() ? 0 : pieces.back().second;
}

void Pretokenizer::run_rest(std::string_view text, size_t from,
                            const std::function<void(std::string_view)>& on_word) const {
  emit(text, splits[0].split_isolated(text, from), on_word);
}

// on_word for each piece in the ByteLevel alphabet (the last step of single_split()).
void Pretokenizer::emit(std::string_view text, const std::vector<std::pair<size_t, size_t>>& pieces,
                        const std::function<void(std::string_view)>& on_word) const {
  std::string word;
  for (auto [begin, end] : pieces) {
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
