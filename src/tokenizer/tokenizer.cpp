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

namespace {

using Piece = tok::AddedTokens::Piece;

void check_utf8(std::string_view text, const char* where) {
  // HF takes Rust strings, always valid UTF-8; PCRE2 and utf8proc rely on it too.
  if (size_t bad = tok::utf8_invalid_at(text); bad != std::string_view::npos)
    throw Error(cat(where, ": text is not valid UTF-8 at byte ", bad));
}

}  // namespace

void Tokenizer::Impl::encode_raw(std::string_view text, const Piece& raw,
                                 std::vector<int32_t>& ids) const {
  const Impl& m = *this;
  if (raw.id >= 0) {
    ids.push_back(raw.id);
    return;
  }
  std::string_view piece = text.substr(raw.begin, raw.end - raw.begin);
  std::string normalized;
  if (m.nfc) {
    normalized = tok::nfc(piece);
    piece = normalized;
  }
  const std::function<void(std::string_view)> bpe = [&](std::string_view word) {
    m.bpe.encode_word(word, ids);
  };
  for (const auto& p : m.added.split(piece, /*normalized=*/true)) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      m.pretokenizer.run(piece.substr(p.begin, p.end - p.begin), bpe);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  check_utf8(text, "Tokenizer::encode");
  std::vector<int32_t> ids;
  for (const Piece& raw : impl_->added.split(text, /*normalized=*/false))
    impl_->encode_raw(text, raw, ids);
  return ids;
}

// The reusable part of a prefix P: its raw pieces before the last one, which starts at
// piece_begin (k) and is text (not an added token), then that piece's Split pieces up to `cut`
// (c), where the final pieces of P[k, |P|) end (Regex::final_split). For a text T that
// starts with P, has P's raw pieces before k and one raw piece [k, e) with e >= |P|, and where
// NFC cannot merge P's last character with T[|P|] (e = |P|, or T[|P|] is ASCII: ASCII is never
// the second character of a composition), that piece normalizes to P[k, |P|) ++ nfc(T[|P|, e))
// (P[k, |P|) is already NFC). A match that is final in P[k, |P|) is then a match of that
// normalized piece with the same pieces before it, so T's ids are P's ids of [0, c) followed by
// the pieces from c on.
struct Tokenizer::Prefix::State {
  std::string text;
  size_t piece_begin = 0;
  size_t cut = 0;  // relative to piece_begin; the part is text[0, piece_begin + cut)
  bool reusable = false;
  std::vector<Piece> raw_before;
  std::vector<int32_t> ids;  // of text[0, piece_begin + cut)
};

Tokenizer::Prefix::Prefix() = default;
Tokenizer::Prefix::Prefix(Prefix&&) noexcept = default;
Tokenizer::Prefix& Tokenizer::Prefix::operator=(Prefix&&) noexcept = default;
Tokenizer::Prefix::~Prefix() = default;

size_t Tokenizer::Prefix::shared_bytes() const {
  return state_ && state_->reusable ? state_->piece_begin + state_->cut : 0;
}

Tokenizer::Prefix Tokenizer::prefix(std::string_view text) const {
  check_utf8(text, "Tokenizer::prefix");
  const Impl& m = *impl_;
  auto state = std::make_unique<Prefix::State>();
  state->text = std::string(text);
  Prefix prefix;
  const std::vector<Piece> raw = m.added.split(text, /*normalized=*/false);
  if (m.pretokenizer.single_split() && !m.added.any_normalized() && !raw.empty() &&
      raw.back().id < 0) {
    const size_t k = raw.back().begin;
    const std::string_view piece = text.substr(k);
    if (!m.nfc || tok::nfc(piece) == piece) {
      state->reusable = true;
      state->piece_begin = k;
      state->raw_before.assign(raw.begin(), raw.end() - 1);
      for (const Piece& p : state->raw_before) m.encode_raw(text, p, state->ids);
      state->cut = m.pretokenizer.run_final(
          piece, [&](std::string_view word) { m.bpe.encode_word(word, state->ids); });
    }
  }
  prefix.state_ = std::move(state);
  return prefix;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const Prefix& prefix) const {
  FLIDE_CHECK(prefix.state_, "Tokenizer::encode: a moved-from Prefix");
  const Prefix::State& st = *prefix.state_;
  if (text.substr(0, st.text.size()) != st.text)
    throw Error("Tokenizer::encode: the text does not start with the prefix's text");
  if (!st.reusable) return encode(text);
  check_utf8(text.substr(st.text.size()), "Tokenizer::encode");
  const Impl& m = *impl_;
  const std::vector<Piece> raw = m.added.split(text, /*normalized=*/false);
  const size_t n = st.raw_before.size(), k = st.piece_begin, p_end = st.text.size();
  const auto same = [](const Piece& a, const Piece& b) {
    return a.begin == b.begin && a.end == b.end && a.id == b.id;
  };
  if (raw.size() <= n ||
      !std::equal(st.raw_before.begin(), st.raw_before.end(), raw.begin(), same) ||
      raw[n].id >= 0 || raw[n].begin != k || raw[n].end < p_end ||
      (m.nfc && raw[n].end > p_end && uint8_t(text[p_end]) >= 0x80))
    return encode(text);

  std::vector<int32_t> ids = st.ids;
  std::string normalized(text.substr(k, p_end - k));
  const std::string_view rest = text.substr(p_end, raw[n].end - p_end);
  normalized += m.nfc ? tok::nfc(rest) : std::string(rest);
  m.pretokenizer.run_rest(normalized, st.cut,
                          [&](std::string_view word) { m.bpe.encode_word(word, ids); });
  for (size_t i = n + 1; i < raw.size(); ++i) m.encode_raw(text, raw[i], ids);
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
