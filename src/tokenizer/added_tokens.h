// Added tokens (special or not) as HF's AddedVocabulary handles them: they are cut out of the
// text before BPE, leftmost match first and the longest one at that position, honouring
// single_word / lstrip / rstrip. Tokens with normalized=false are matched in the raw text;
// those with normalized=true in each normalized piece, against their normalized content.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"

namespace flide::tok {

struct AddedToken {
  std::string content;
  int32_t id;
  bool single_word = false;  // only where not inside a word (Rust \w on both sides)
  bool lstrip = false;       // swallows the white space before it
  bool rstrip = false;       // swallows the white space after it
  bool normalized = false;   // matched after normalization instead of in the raw text
};

class AddedTokens {
 public:
  // `match_text` is what is searched for: the content, normalized when token.normalized.
  void add(AddedToken token, std::string match_text);

  struct Piece {
    size_t begin, end;  // byte range of the text
    int32_t id;         // the added token's id, or -1 for text between tokens
  };
  // HF's find_matches over one group (normalized or not); empty text gives no pieces.
  std::vector<Piece> split(std::string_view text, bool normalized) const;

  std::optional<int32_t> id_of(std::string_view content) const;
  const std::string* content_of(int32_t id) const;
  int32_t max_id() const { return max_id_; }
  bool any_normalized() const { return any_normalized_; }  // some token has normalized=true

 private:
  struct Group {
    std::array<std::vector<size_t>, 256> by_first;  // first byte -> tokens_ indices, longest first
    std::string first_bytes;                        // the distinct first bytes, for skipping
  };
  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_texts_;       // parallel to tokens_
  Group groups_[2];                            // [0] raw text, [1] normalized text
  TokenIds ids_;                               // content -> id
  std::unordered_map<int32_t, size_t> by_id_;  // id -> index into tokens_
  int32_t max_id_ = -1;
  bool any_normalized_ = false;
};

}  // namespace flide::tok
