// HF's BPE model for one pre-token: split into characters, look each up in the vocabulary,
// then apply merges lowest rank first (leftmost first among equal ranks), exactly in the order
// HF's Word::merge_all does, stale-entry check included, so ids match on every input.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flide::tok {

struct StringHash {
  using is_transparent = void;  // find() with a string_view, without building a std::string
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

inline uint64_t merge_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}

struct Bpe {
  struct Merge {
    int32_t rank;    // line number in model.merges: lower merges first
    int32_t merged;  // id of left + right
  };

  TokenIds vocab;                              // alphabet text -> id
  std::vector<std::string> tokens;             // id -> alphabet text; empty where unused
  std::unordered_map<uint64_t, Merge> merges;  // merge_key(left id, right id) -> merge
  std::optional<int32_t> unk_id;               // stands for characters not in the vocabulary
  bool fuse_unk = false;                       // consecutive unknowns become one unk
  bool ignore_merges = false;                  // a word already in the vocabulary is one token

  std::optional<int32_t> id_of(std::string_view token) const;
  // Appends the ids of one pre-token given in the ByteLevel alphabet. Results are cached per
  // word: decision prompts repeat the same long state once per question, and merging is most
  // of a tokenization's cost.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  // Shared by every thread using the tokenizer, in shards by word hash so that server threads
  // rarely wait on one another; a full shard is cleared (a bound, not an LRU: the words of one
  // request are re-learnt at the cost of one pass).
  struct CacheShard {
    static constexpr size_t kMaxWords = size_t(1) << 14;
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  static constexpr size_t kCacheShards = 16;
  std::shared_ptr<CacheShard[]> cache_{new CacheShard[kCacheShards]};
};

}  // namespace flide::tok
