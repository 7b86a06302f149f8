// A hand-made byte-level BPE tokenizer.json (256 byte tokens, a few merges, the Qwen3.5 Split
// regex), whose ids can be worked out by hand, plus the load errors. Needs no ../shared.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"

namespace fs = std::filesystem;
using flide::Tokenizer;
using nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

const char* qwen35_pattern = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N})"
                             R"(| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* qwen2_pattern = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                            R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode, written out independently of the library's table.
std::string alphabet(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unsigned c = b;
    if (!printable) {
      c = 256;
      for (unsigned k = 0; k < b; ++k)
        c += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE);
    }
    if (c < 0x80) {
      out += char(c);
    } else {
      out += char(0xC0 | (c >> 6));
      out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// Merges as byte strings; merge k makes token 256 + k. Byte b is token b.
const std::vector<std::pair<std::string, std::string>> merges = {
    {"h", "e"},                        // 256
    {"l", "l"},                        // 257
    {"he", "ll"},                      // 258
    {"hell", "o"},                     // 259 "hello"
    {" ", "w"},                        // 260
    {"o", "r"},                        // 261
    {" w", "or"},                      // 262
    {"l", "d"},                        // 263
    {" wor", "ld"},                    // 264 " world"
    {"L", "A"},                        // 265, ranked before "'L" + "L"
    {"'", "L"},                        // 266
    {"'L", "L"},                       // 267 "'LL"
    {"\xC3", "\xA9"},                  // 268 "é"
    {"\xE0", "\xA4"},                  // 269
    {"\xE0\xA4", "\x95"},              // 270 "क"
    {"\xE0\xA4", "\xBF"},              // 271 "ि" (U+093F, a spacing mark)
    {"\xE0\xA4\x95", "\xE0\xA4\xBF"},  // 272 "कि"
    {"x", "\xCC"},                     // 273
    {"x\xCC", "\x81"},                 // 274 "x" + U+0301
};
int32_t id_of_merge(const std::string& left, const std::string& right) {
  for (size_t k = 0; k < merges.size(); ++k)
    if (merges[k].first == left && merges[k].second == right) return int32_t(256 + k);
  return -1;
}

json tokenizer_json(const std::string& pattern, bool merges_as_pairs = true) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[alphabet(std::string(1, char(b)))] = b;
  json merge_list = json::array();
  for (size_t k = 0; k < merges.size(); ++k) {
    std::string left = alphabet(merges[k].first), right = alphabet(merges[k].second);
    vocab[left + right] = 256 + int(k);
    if (merges_as_pairs)
      merge_list.push_back({left, right});
    else
      merge_list.push_back(left + " " + right);
  }
  auto added = [](int id, const char* content, bool special, bool lstrip = false,
                  bool single_word = false) {
    return json{{"id", id},          {"content", content}, {"single_word", single_word},
                {"lstrip", lstrip},  {"rstrip", false},    {"normalized", !special},
                {"special", special}};
  };
  return {{"version", "1.0"},
          {"added_tokens",
           {added(300, "<|im_start|>", true), added(301, "<|im_end|>", true),
            added(302, "<|im", true), added(303, "<mask>", false, /*lstrip=*/true),
            added(304, "<w>", false, false, /*single_word=*/true), added(305, "[SEP]", true)}},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", pattern}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", false},
               {"use_regex", false}}}}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

fs::path write(const std::string& name, const std::string& text) {
  fs::path path = fs::path(testing::TempDir()) / ("flide_" + name + ".json");
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

Tokenizer load(const json& j, const std::string& name) {
  return Tokenizer::load(write(name, j.dump()));
}

// The flide::Error message of loading `text`, "" if it loads.
std::string load_error(const std::string& text, const std::string& name) {
  try {
    Tokenizer::load(write(name, text));
  } catch (const flide::Error& e) {
    return e.what();
  }
  return "";
}

Ids bytes(const std::string& s) {
  return Ids(s.begin(), s.end());
}

}  // namespace

TEST(Tokenizer, MergesByRank) {
  Tokenizer tok = load(tokenizer_json(qwen35_pattern), "merges");
  EXPECT_EQ(tok.encode("hello world"), (Ids{259, 264}));
  EXPECT_EQ(tok.encode("hellx"), (Ids{258, 'x'}));  // "hell" then no (hell, x) merge
  EXPECT_EQ(tok.encode("helo"), (Ids{256, 'l', 'o'}));
  EXPECT_EQ(tok.encode("2024"), (Ids{'2', '0', '2', '4'}));
  EXPECT_EQ(tok.encode(""), Ids{});
  EXPECT_EQ(tok.decode({259, 264}), "hello world");
  EXPECT_EQ(tok.vocab_size(), 306);
  EXPECT_EQ(tok.token_id("hello"), 259);
  EXPECT_EQ(tok.token_id("Ġworld"), 264);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 301);
}

TEST(Tokenizer, MergesAsStringsEqualPairs) {
  Tokenizer pairs = load(tokenizer_json(qwen35_pattern, true), "pairs");
  Tokenizer strings = load(tokenizer_json(qwen35_pattern, false), "strings");
  for (const char* s : {"hello world", "I'LL hello", " world\n\n"})
    EXPECT_EQ(pairs.encode(s), strings.encode(s)) << s;
}

TEST(Tokenizer, ContractionsAreCaseInsensitive) {
  Tokenizer tok = load(tokenizer_json(qwen35_pattern), "contractions");
  // (?i:'ll) cuts "'LL" off "AMA"; as the letter run "'LLAMA", L+A would merge first instead.
  EXPECT_EQ(tok.encode("I'LLAMA"), (Ids{'I', id_of_merge("'L", "L"), 'A', 'M', 'A'}));
  EXPECT_EQ(tok.encode("LLAMA"), (Ids{'L', id_of_merge("L", "A"), 'M', 'A'}));
}

TEST(Tokenizer, NormalizesToNfc) {
  Tokenizer tok = load(tokenizer_json(qwen35_pattern), "nfc");
  Ids e_acute{id_of_merge("\xC3", "\xA9")};
  EXPECT_EQ(tok.encode("\xC3\xA9"), e_acute);   // precomposed é
  EXPECT_EQ(tok.encode("e\xCC\x81"), e_acute);  // e + U+0301
  EXPECT_EQ(tok.decode(tok.encode("e\xCC\x81")), "\xC3\xA9");
}

// Qwen3.5 keeps combining marks in letter runs; Qwen2 splits them off as punctuation.
TEST(Tokenizer, MarksFollowTheFileRegex) {
  Tokenizer qwen35 = load(tokenizer_json(qwen35_pattern), "qwen35");
  Tokenizer qwen2 = load(tokenizer_json(qwen2_pattern), "qwen2");
  const std::string ka = "\xE0\xA4\x95", vowel_i = "\xE0\xA4\xBF";  // क, ि (U+093F, Mc)
  EXPECT_EQ(qwen35.encode(ka + vowel_i), (Ids{id_of_merge(ka, vowel_i)}));
  EXPECT_EQ(qwen2.encode(ka + vowel_i),
            (Ids{id_of_merge("\xE0\xA4", "\x95"), id_of_merge("\xE0\xA4", "\xBF")}));
  // x + U+0301 has no precomposed form, so NFC keeps the mark (Mn).
  EXPECT_EQ(qwen35.encode("x\xCC\x81"), (Ids{id_of_merge("x\xCC", "\x81")}));
  EXPECT_EQ(qwen2.encode("x\xCC\x81"), (Ids{'x', 0xCC, 0x81}));
  EXPECT_EQ(qwen2.decode(qwen2.encode(ka + vowel_i)), ka + vowel_i);
}

TEST(Tokenizer, AddedTokensLongestMatchFirst) {
  Tokenizer tok = load(tokenizer_json(qwen35_pattern), "added");
  EXPECT_EQ(tok.encode("<|im_start|>hello<|im_end|>"), (Ids{300, 259, 301}));
  EXPECT_EQ(tok.encode("<|im"), (Ids{302}));  // shorter token where the longer fails
  EXPECT_EQ(tok.encode("<|im_sta"), (Ids{302, '_', 's', 't', 'a'}));
  EXPECT_EQ(tok.encode("<|"), bytes("<|"));
  // Raw tokens with two first bytes ('<', '['): the scan stops at either.
  EXPECT_EQ(tok.encode("a[SEP]b<|im_end|>[S"), (Ids{'a', 305, 'b', 301, '[', 'S'}));
  EXPECT_EQ(tok.decode({300, 259, 301}), "<|im_start|>hello<|im_end|>");
}

TEST(Tokenizer, AddedTokenFlags) {
  Tokenizer tok = load(tokenizer_json(qwen35_pattern), "flags");
  EXPECT_EQ(tok.encode("o <mask>"), (Ids{'o', 303}));                      // lstrip takes the space
  EXPECT_EQ(tok.encode("o<w> <w>"), (Ids{'o', '<', 'w', '>', ' ', 304}));  // single_word
}

TEST(Tokenizer, DecodeSkipsUnknownIds) {
  Tokenizer tok = load(tokenizer_json(qwen35_pattern), "unknown_ids");
  EXPECT_EQ(tok.decode({'a', 100000, -1, 'b'}), "ab");
}

TEST(Tokenizer, RejectsInvalidUtf8) {
  Tokenizer tok = load(tokenizer_json(qwen35_pattern), "invalid_utf8");
  EXPECT_THROW(tok.encode("ab\xFF"), flide::Error);
  EXPECT_THROW(tok.encode("\xED\xA0\x80"), flide::Error);  // a UTF-16 surrogate
}

TEST(TokenizerLoad, MissingFile) {
  try {
    Tokenizer::load("/nonexistent/tokenizer.json");
    FAIL() << "no error";
  } catch (const flide::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, ErrorsNameTheField) {
  auto edited = [](auto edit) {
    json j = tokenizer_json(qwen35_pattern);
    edit(j);
    return j.dump();
  };
  struct Expect {
    std::string name, text, message;
  };
  const std::vector<Expect> cases = {
      {"malformed", "{\"model\": ", "malformed JSON"},
      {"model_type", edited([](json& j) { j["model"]["type"] = "WordPiece"; }),
       "model.type: 'WordPiece' is not supported"},
      {"no_merges", edited([](json& j) { j["model"].erase("merges"); }),
       "model.merges: is missing"},
      {"bad_merge", edited([](json& j) { j["model"]["merges"][0] = "h"; }), "model.merges[0]"},
      {"merge_not_in_vocab", edited([](json& j) {
         j["model"]["merges"][0] = {"q", "z"};
       }),
       "model.merges[0]: token 'qz' is not in model.vocab"},
      {"normalizer", edited([](json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       }),
       "normalizer.type: normalizer 'Lowercase' is not supported"},
      {"pre_tokenizer", edited([](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Whitespace"}};
       }),
       "pre_tokenizer.pretokenizers[0].type"},
      {"behavior",
       edited([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }),
       "pre_tokenizer.pretokenizers[0].behavior"},
      {"regex",
       edited([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; }),
       "pre_tokenizer.pretokenizers[0].pattern: regex does not compile"},
      {"no_byte_level", edited([](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }),
       "no ByteLevel"},
      {"byte_fallback", edited([](json& j) { j["model"]["byte_fallback"] = true; }),
       "model.byte_fallback"},
      {"decoder", edited([](json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       }),
       "decoder.type"},
      {"added_id", edited([](json& j) { j["added_tokens"][1]["id"] = "x"; }), "added_tokens[1].id"},
  };
  for (const Expect& c : cases) {
    std::string message = load_error(c.text, "error_" + c.name);
    EXPECT_NE(message.find(c.message), std::string::npos)
        << c.name << ": got \"" << message << "\", want it to contain \"" << c.message << "\"";
    EXPECT_NE(message.find("flide_error_" + c.name), std::string::npos)
        << "names the file: " << message;
  }
}

TEST(TokenizerLoad, AcceptsNormalizerVariants) {
  json none = tokenizer_json(qwen35_pattern);
  none["normalizer"] = nullptr;
  json sequence = tokenizer_json(qwen35_pattern);
  sequence["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  EXPECT_EQ(load(none, "no_normalizer").encode("e\xCC\x81"), (Ids{'e', 0xCC, 0x81}));
  EXPECT_EQ(load(sequence, "nfc_sequence").encode("e\xCC\x81"), (Ids{id_of_merge("\xC3", "\xA9")}));
}
