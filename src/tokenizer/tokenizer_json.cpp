// Tokenizer::load: reads tokenizer.json into Tokenizer::Impl. Only what changes ids is read:
// normalizer, pre_tokenizer, model, added_tokens, and decoder for decode. post_processor only
// adds BOS/EOS and flide never adds them; truncation and padding are the engine's business.
// Anything else unsupported fails with the file and the JSON path of the field.
#include <cctype>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace flide {
namespace {

using nlohmann::json;

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : cat(path, ".", key);
}
std::string index(const std::string& path, size_t i) {
  return cat(path, "[", i, "]");
}

// Typed access to the JSON tree; every failure names the file and the field.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    throw Error(cat(file_, ": ", path.empty() ? "" : path + ": ", problem));
  }

  // object[key], or nullptr when it is absent or null.
  const json* optional(const json& object, const std::string& path, const char* key) const {
    if (!object.is_object()) fail(path, "is not a JSON object");
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& required(const json& object, const std::string& path, const char* key) const {
    const json* v = optional(object, path, key);
    if (!v) fail(join(path, key), "is missing");
    return *v;
  }
  std::string string(const json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, "is not a string");
    return v.get<std::string>();
  }
  bool flag(const json& object, const std::string& path, const char* key, bool absent) const {
    const json* v = optional(object, path, key);
    if (!v) return absent;
    if (!v->is_boolean()) fail(join(path, key), "is not true/false");
    return v->get<bool>();
  }
  int32_t id(const json& v, const std::string& path) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail(path, "is not a token id (an integer in [0, 2^31))");
    return int32_t(v.get<int64_t>());
  }
  const json& array(const json& v, const std::string& path) const {
    if (!v.is_array()) fail(path, "is not a JSON array");
    return v;
  }
  std::string type(const json& object, const std::string& path) const {
    return string(required(object, path, "type"), join(path, "type"));
  }

 private:
  std::string file_;
};

// NFC, a Sequence of NFC, or nothing.
bool read_normalizer(const Reader& r, const json& n, const std::string& path) {
  std::string type = r.type(n, path);
  if (type == "NFC") return true;
  if (type == "Sequence") {
    std::string list = join(path, "normalizers");
    bool nfc = false;
    const json& items = r.array(r.required(n, path, "normalizers"), list);
    for (size_t i = 0; i < items.size(); ++i) nfc |= read_normalizer(r, items[i], index(list, i));
    return nfc;
  }
  r.fail(join(path, "type"),
         cat("normalizer '", type,
             "' is not supported (flide reads NFC, a Sequence of NFC, or null)"));
}

// A Split pattern as PCRE2 source: {"Regex": ...} as is, {"String": ...} quoted.
std::string read_split_pattern(const Reader& r, const json& split, const std::string& path) {
  std::string at = join(path, "pattern");
  const json& pattern = r.required(split, path, "pattern");
  if (const json* regex = r.optional(pattern, at, "Regex"))
    return r.string(*regex, join(at, "Regex"));
  if (const json* literal = r.optional(pattern, at, "String")) {
    std::string quoted;
    for (char c : r.string(*literal, join(at, "String"))) {
      // A backslash before ASCII punctuation always means the character itself in PCRE2.
      if (uint8_t(c) < 0x80 && !std::isalnum(uint8_t(c))) quoted += '\\';
      quoted += c;
    }
    return quoted;
  }
  r.fail(at, "has neither Regex nor String");
}

tok::Pretokenizer read_pretokenizer(const Reader& r, const json& root, const std::string& file) {
  const json* pt = r.optional(root, "", "pre_tokenizer");
  if (!pt) r.fail("pre_tokenizer", "is missing; flide reads byte-level BPE, which needs ByteLevel");
  std::vector<std::pair<const json*, std::string>> steps;
  if (r.type(*pt, "pre_tokenizer") == "Sequence") {
    const json& items =
        r.array(r.required(*pt, "pre_tokenizer", "pretokenizers"), "pre_tokenizer.pretokenizers");
    for (size_t i = 0; i < items.size(); ++i)
      steps.emplace_back(&items[i], index("pre_tokenizer.pretokenizers", i));
  } else {
    steps.emplace_back(pt, "pre_tokenizer");
  }

  tok::Pretokenizer out;
  bool byte_level = false;
  for (const auto& [step, path] : steps) {
    std::string type = r.type(*step, path);
    if (byte_level)
      r.fail(path, cat("'", type, "' after ByteLevel is not supported (ByteLevel must come last)"));
    if (type == "Split") {
      std::string behavior = r.string(r.required(*step, path, "behavior"), join(path, "behavior"));
      if (behavior != "Isolated")
        r.fail(join(path, "behavior"), cat("'", behavior, "' is not supported (only Isolated)"));
      if (r.flag(*step, path, "invert", false))
        r.fail(join(path, "invert"), "true is not supported");
      out.splits.emplace_back(read_split_pattern(r, *step, path),
                              cat(file, ": ", join(path, "pattern")));
    } else if (type == "ByteLevel") {
      byte_level = true;
      out.add_prefix_space = r.flag(*step, path, "add_prefix_space", true);  // HF defaults
      if (r.flag(*step, path, "use_regex", true))
        out.byte_level_regex.emplace(tok::gpt2_pattern, cat(file, ": ", path));
    } else {
      r.fail(join(path, "type"),
             cat("pre-tokenizer '", type, "' is not supported (flide reads Split and ByteLevel)"));
    }
  }
  if (!byte_level)
    r.fail("pre_tokenizer", "has no ByteLevel step; flide reads byte-level BPE only");
  return out;
}

tok::Bpe read_model(const Reader& r, const json& root) {
  const json& model = r.required(root, "", "model");
  std::string type = r.type(model, "model");
  if (type != "BPE") r.fail("model.type", cat("'", type, "' is not supported (only BPE)"));
  if (const json* dropout = r.optional(model, "model", "dropout");
      dropout && (!dropout->is_number() || dropout->get<double>() != 0.0))
    r.fail("model.dropout", "is set; BPE dropout (random merges) is not supported");
  if (r.flag(model, "model", "byte_fallback", false))
    r.fail("model.byte_fallback", "true is not supported (byte-level BPE needs no fallback)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* v = r.optional(model, "model", affix);
        v && !r.string(*v, join("model", affix)).empty())
      r.fail(join("model", affix), "is not supported (byte-level BPE has none)");

  tok::Bpe bpe;
  const json& vocab = r.required(model, "model", "vocab");
  if (!vocab.is_object()) r.fail("model.vocab", "is not a JSON object");
  bpe.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int32_t id = r.id(it.value(), cat("model.vocab[\"", it.key(), "\"]"));
    bpe.vocab[it.key()] = id;
    if (size_t(id) >= bpe.tokens.size()) bpe.tokens.resize(size_t(id) + 1);
    bpe.tokens[size_t(id)] = it.key();
  }

  auto vocab_id = [&](const std::string& token, const std::string& path) {
    auto id = bpe.id_of(token);
    if (!id) r.fail(path, cat("token '", token, "' is not in model.vocab"));
    return *id;
  };
  const json& merges = r.array(r.required(model, "model", "merges"), "model.merges");
  bpe.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    std::string path = index("model.merges", i);
    std::string left, right;
    if (merges[i].is_string()) {  // older files: "left right"
      std::string line = merges[i].get<std::string>();
      size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        r.fail(path, cat("'", line, "' is not two tokens separated by one space"));
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merges[i].is_array() && merges[i].size() == 2) {  // newer files: ["left", "right"]
      left = r.string(merges[i][0], index(path, 0));
      right = r.string(merges[i][1], index(path, 1));
    } else {
      r.fail(path, "is neither \"left right\" nor [\"left\", \"right\"]");
    }
    int32_t merged = vocab_id(left + right, path);
    // A repeated pair keeps its last rank, as HF's HashMap collect does.
    bpe.merges[tok::merge_key(vocab_id(left, path), vocab_id(right, path))] = {int32_t(i), merged};
  }

  if (const json* unk = r.optional(model, "model", "unk_token"))
    bpe.unk_id = vocab_id(r.string(*unk, "model.unk_token"), "model.unk_token");
  bpe.fuse_unk = r.flag(model, "model", "fuse_unk", false);
  bpe.ignore_merges = r.flag(model, "model", "ignore_merges", false);
  return bpe;
}

void read_added_tokens(const Reader& r, const json& root, bool nfc, tok::AddedTokens& out) {
  const json* list = r.optional(root, "", "added_tokens");
  if (!list) return;
  r.array(*list, "added_tokens");
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    std::string path = index("added_tokens", i);
    tok::AddedToken token;
    token.content = r.string(r.required(t, path, "content"), join(path, "content"));
    token.id = r.id(r.required(t, path, "id"), join(path, "id"));
    token.single_word = r.flag(t, path, "single_word", false);
    token.lstrip = r.flag(t, path, "lstrip", false);
    token.rstrip = r.flag(t, path, "rstrip", false);
    token.normalized = r.flag(t, path, "normalized", !r.flag(t, path, "special", false));
    if (token.content.empty()) continue;  // HF ignores empty added tokens
    std::string match = token.normalized && nfc ? tok::nfc(token.content) : token.content;
    out.add(std::move(token), std::move(match));
  }
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& tokenizer_json) {
  const std::string file = tokenizer_json.string();
  std::ifstream in(tokenizer_json, std::ios::binary);
  if (!in) throw Error(cat(file, ": cannot open tokenizer.json"));
  Reader r(file);
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    r.fail("", cat("malformed JSON (", e.what(), ")"));
  }
  if (!root.is_object()) r.fail("", "is not a JSON object");

  Tokenizer t;
  Impl& m = *t.impl_;
  if (const json* n = r.optional(root, "", "normalizer"))
    m.nfc = read_normalizer(r, *n, "normalizer");
  m.pretokenizer = read_pretokenizer(r, root, file);
  m.bpe = read_model(r, root);
  read_added_tokens(r, root, m.nfc, m.added);

  const json& decoder = r.required(root, "", "decoder");
  if (std::string type = r.type(decoder, "decoder"); type != "ByteLevel")
    r.fail("decoder.type", cat("'", type, "' is not supported (only ByteLevel)"));
  return t;
}

}  // namespace flide
