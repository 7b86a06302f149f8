// Tokenizer::Impl: what tokenizer.json becomes after loading (tokenizer_json.cpp), used by
// encode/decode (tokenizer.cpp). Everything here is read-only after load, so one Tokenizer
// serves any number of threads.
#pragma once

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace flide {

struct Tokenizer::Impl {
  bool nfc = false;  // normalizer: NFC, else none
  tok::AddedTokens added;
  tok::Pretokenizer pretokenizer;
  tok::Bpe bpe;

  // Appends the ids of one raw piece of `text` (an added token, or the text between two).
  void encode_raw(std::string_view text, const tok::AddedTokens::Piece& raw,
                  std::vector<int32_t>& ids) const;
};

}  // namespace flide
