// BPE merging behind bpe.h: a doubly linked list of symbols plus a min-heap of candidate
// merges, O(n log n) per word, so one 30 KB run of letters is still fast.
#include "tokenizer/bpe.h"

#include <queue>

namespace flide::tok {
namespace {

struct Symbol {
  int32_t id;
  int32_t prev, next;  // neighbours in the list, -1 at the ends
  bool alive;          // false once merged into its left neighbour
};

struct Candidate {
  int32_t rank;
  int32_t pos;     // index of the left symbol
  int32_t merged;  // expected result; a mismatch means the entry went stale
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

size_t utf8_length(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace

std::optional<int32_t> Bpe::id_of(std::string_view token) const {
  auto it = vocab.find(token);
  if (it == vocab.end()) return std::nullopt;
  return it->second;
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  CacheShard& shard = cache_[StringHash{}(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(word, out);
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.words.size() >= CacheShard::kMaxWords) shard.words.clear();
  shard.words.emplace(std::string(word), std::vector<int32_t>(out.begin() + first, out.end()));
}

void Bpe::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    if (auto id = id_of(word)) {
      out.push_back(*id);
      return;
    }
  }

  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    int32_t n = int32_t(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[size_t(n - 1)].next = n;
  };
  bool last_was_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t n = utf8_length(uint8_t(word[i]));
    std::optional<int32_t> id = id_of(word.substr(i, n));
    i += n;
    if (id) {
      add(*id);
      last_was_unk = false;
    } else if (unk_id) {  // without an unk token HF drops the character
      if (!(fuse_unk && last_was_unk)) add(*unk_id);
      last_was_unk = true;
    }
  }

  auto candidate = [&](int32_t pos) -> std::optional<Candidate> {
    int32_t next = symbols[size_t(pos)].next;
    if (next < 0) return std::nullopt;
    auto it = merges.find(merge_key(symbols[size_t(pos)].id, symbols[size_t(next)].id));
    if (it == merges.end()) return std::nullopt;
    return Candidate{it->second.rank, pos, it->second.merged};
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (int32_t pos = 0; pos + 1 < int32_t(symbols.size()); ++pos)
    if (auto c = candidate(pos)) queue.push(*c);

  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(top.pos)];
    if (!left.alive || left.next < 0) continue;
    // HF checks only that the current pair still merges into the same id, not the same rank.
    auto now = candidate(top.pos);
    if (!now || now->merged != top.merged) continue;
    Symbol& right = symbols[size_t(left.next)];
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[size_t(right.next)].prev = top.pos;
    if (left.prev >= 0)
      if (auto c = candidate(left.prev)) queue.push(*c);
    if (auto c = candidate(top.pos)) queue.push(*c);
  }

  for (const Symbol& s : symbols)
    if (s.alive) out.push_back(s.id);
}

}  // namespace flide::tok
