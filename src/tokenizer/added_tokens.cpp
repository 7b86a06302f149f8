// Added-token matching behind added_tokens.h; the lstrip/rstrip/single_word rules follow HF's
// AddedVocabulary::find_matches line for line.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/unicode.h"

namespace flide::tok {

void AddedTokens::add(AddedToken token, std::string match_text) {
  size_t index = tokens_.size();
  ids_[token.content] = token.id;
  by_id_[token.id] = index;
  max_id_ = std::max(max_id_, token.id);
  any_normalized_ |= token.normalized;
  Group& group = groups_[token.normalized];
  std::vector<size_t>& same_first = group.by_first[uint8_t(match_text.front())];
  if (same_first.empty()) group.first_bytes += match_text.front();
  same_first.push_back(index);
  // Longest first, so the first hit at a position is the longest; ties keep file order.
  std::stable_sort(same_first.begin(), same_first.end(), [&](size_t a, size_t b) {
    const std::string& ta = a == index ? match_text : match_texts_[a];
    const std::string& tb = b == index ? match_text : match_texts_[b];
    return ta.size() > tb.size();
  });
  tokens_.push_back(std::move(token));
  match_texts_.push_back(std::move(match_text));
}

std::vector<AddedTokens::Piece> AddedTokens::split(std::string_view text, bool normalized) const {
  std::vector<Piece> pieces;
  const Group& group = groups_[normalized];
  size_t start_offset = 0;  // end of the last emitted token
  // Only a byte that starts some token can start a match: jump to the next one (memchr when
  // all tokens start alike, e.g. '<' for every Qwen added token).
  const auto next_start = [&](size_t from) {
    if (from >= text.size()) return text.size();
    if (group.first_bytes.size() == 1) {
      const void* hit = std::memchr(text.data() + from, group.first_bytes[0], text.size() - from);
      return hit ? size_t(static_cast<const char*>(hit) - text.data()) : text.size();
    }
    while (from < text.size() && group.by_first[uint8_t(text[from])].empty()) ++from;
    return from;
  };
  for (size_t at = next_start(0); at < text.size(); at = next_start(at)) {
    const std::vector<size_t>& candidates = group.by_first[uint8_t(text[at])];
    const AddedToken* hit = nullptr;
    size_t length = 0;
    for (size_t index : candidates) {
      const std::string& m = match_texts_[index];
      if (text.substr(at, m.size()) == m) {
        hit = &tokens_[index];
        length = m.size();
        break;
      }
    }
    if (!hit) {
      ++at;
      continue;
    }
    size_t start = at, stop = at + length;
    at = stop;  // matches never overlap in the original text, even after rstrip (as in HF)
    if (hit->single_word) {
      size_t before = start, after = stop;
      bool word_before = start > 0 && is_word_char(utf8_prev(text, before));
      bool word_after = stop < text.size() && is_word_char(utf8_next(text, after));
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t prev = s;
        if (!is_white_space(utf8_prev(text, prev))) break;
        s = prev;
      }
      start = std::max(s, start_offset);  // spaces an earlier rstrip took stay with it
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!is_white_space(utf8_next(text, next))) break;
        stop = next;
      }
    }
    if (start_offset < start) pieces.push_back({start_offset, start, -1});
    pieces.push_back({start, stop, hit->id});
    start_offset = stop;
  }
  if (start_offset < text.size()) pieces.push_back({start_offset, text.size(), -1});
  return pieces;
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  auto it = ids_.find(content);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedTokens::content_of(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second].content;
}

}  // namespace flide::tok
