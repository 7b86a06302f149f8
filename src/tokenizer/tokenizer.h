// Hugging Face tokenizer.json, byte-level BPE (Qwen2 / Qwen3.5 family): NFC normalizer, the
// Split pre-tokenizer regex read from the file (PCRE2, Unicode classes), ByteLevel mapping,
// ranked BPE merges, added/special tokens matched before BPE, ByteLevel decoding.
// Token ids equal HF `tokenizers`' on every input (tests/tokenizer).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flide {

class Tokenizer {
 public:
  // Error (flide::Error) naming the file and the field on anything unsupported or malformed.
  static Tokenizer load(const std::filesystem::path& tokenizer_json);

  // No BOS/EOS added. Error if `text` is not valid UTF-8 (HF only takes valid strings).
  std::vector<int32_t> encode(std::string_view text) const;
  // For each suffix, the ids it adds when appended to `text`: encode(text + suffix) ==
  // encode(text) ++ result. Nothing when appending changes text's own ids, or moves one of
  // text's added-token boundaries (callers take both as a change). Cheap for chat prompts:
  // encode works on the pieces between raw added tokens independently, so only the text after
  // text's last added token is tokenized (the whole text when it has none), once for all
  // suffixes.
  std::vector<std::optional<std::vector<int32_t>>> encode_appended(
      std::string_view text, const std::vector<std::string>& suffixes) const;
  // A text tokenized once for the encodes of many texts that start with it (a decision
  // request's prompts all start with its state): its longest part whose ids no continuation can
  // change. encode(text, prefix) == encode(text) for every text that starts with the prefix's
  // text; it tokenizes only what follows that part, or, where the part cannot be reused, the
  // whole text: a tokenizer other than one Split regex + ByteLevel, normalized added tokens, a
  // prefix that NFC changes, a continuation that moves an added-token boundary into the prefix or
  // that NFC could merge with it (a non-ASCII first character).
  class Prefix {
   public:
    Prefix();
    Prefix(Prefix&&) noexcept;
    Prefix& operator=(Prefix&&) noexcept;
    ~Prefix();
    size_t shared_bytes() const;  // bytes of the part (0: every encode is a whole one)

   private:
    friend class Tokenizer;
    struct State;
    std::unique_ptr<const State> state_;
  };
  // Error if `text` is not valid UTF-8.
  Prefix prefix(std::string_view text) const;
  // Error if `text` does not start with the prefix's text, or is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, const Prefix& prefix) const;

  // Raw bytes: ids cut mid-character end in a partial UTF-8 sequence (HF would show U+FFFD).
  std::string decode(const std::vector<int32_t>& ids) const;
  std::optional<int32_t> token_id(std::string_view token) const;  // vocab or added token
  int32_t vocab_size() const;                                     // largest id + 1

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flide
