// Encode and decode in HF `tokenizers`' order: added tokens cut from the raw text, NFC on the
// rest, normalized added tokens, pre-tokenizer, BPE per pre-token; decode maps each token back
// through the ByteLevel alphabet.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace flide {

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<std::optional<std::vector<int32_t>>> Tokenizer::encode_appended(
    std::string_view text, const std::vector<std::string>& suffixes) const {
  // k: where text's last raw added token ends; text + suffix must cut at k too, with the same
  // pieces before it, for both encodings to share the ids of text[0, k).
  const auto text_pieces = impl_->added.split(text, /*normalized=*/false);
  size_t k = 0, shared = 0;
  for (size_t i = 0; i < text_pieces.size(); ++i)
    if (text_pieces[i].id >= 0) {
      k = text_pieces[i].end;
      shared = i + 1;
    }
  const std::vector<int32_t> tail = encode(text.substr(k));

  std::vector<std::optional<std::vector<int32_t>>> added;
  for (const std::string& suffix : suffixes) {
    std::optional<std::vector<int32_t>>& out = added.emplace_back();
    const std::string whole = cat(text, suffix);
    const auto whole_pieces = impl_->added.split(whole, /*normalized=*/false);
    if (whole_pieces.size() < shared ||
        !std::equal(text_pieces.begin(), text_pieces.begin() + std::ptrdiff_t(shared),
                    whole_pieces.begin(), [](const auto& a, const auto& b) {
                      return a.begin == b.begin && a.end == b.end && a.id == b.id;
                    }))
      continue;
    std::vector<int32_t> extended = encode(std::string_view(whole).substr(k));
    if (extended.size() < tail.size() || !std::equal(tail.begin(), tail.end(), extended.begin()))
      continue;
    out.emplace(extended.begin() + std::ptrdiff_t(tail.size()), extended.end());
  }
  return added;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  // HF takes Rust strings, always valid UTF-8; PCRE2 and utf8proc rely on it too.
  if (size_t bad = tok::utf8_invalid_at(text); bad != std::string_view::npos)
    throw Error(cat("Tokenizer::encode: text is not valid UTF-8 at byte ", bad));
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  const std::function<void(std::string_view)> bpe = [&](std::string_view word) {
    m.bpe.encode_word(word, ids);
  };
  for (const auto& raw : m.added.split(text, /*normalized=*/false)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string_view piece = text.substr(raw.begin, raw.end - raw.begin);
    std::string normalized;
    if (m.nfc) {
      normalized = tok::nfc(piece);
      piece = normalized;
    }
    for (const auto& p : m.added.split(piece, /*normalized=*/true)) {
      if (p.id >= 0)
        ids.push_back(p.id);
      else
        m.pretokenizer.run(piece.substr(p.begin, p.end - p.begin), bpe);
    }
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  const Impl& m = *impl_;
  std::string out;
  for (int32_t id : ids) {
    const std::string* token = m.added.content_of(id);
    if (!token && id >= 0 && size_t(id) < m.bpe.tokens.size()) token = &m.bpe.tokens[size_t(id)];
    if (token) tok::byte_level_decode(*token, out);  // unknown ids are skipped, as in HF
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (auto id = impl_->added.id_of(token)) return id;
  return impl_->bpe.id_of(token);
}

int32_t Tokenizer::vocab_size() const {
  return std::max(int32_t(impl_->bpe.tokens.size()), impl_->added.max_id() + 1);
}

}  // namespace flide
