// `flide tokenize`: the token ids of a text, as the engine's tokenizer produces them (special
// tokens such as <|im_start|> are matched, nothing is added), to build token-id requests or
// compare with Hugging Face `tokenizers`.
#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace flide::cli {

namespace {

constexpr const char* kUsage = R"(usage: flide tokenize (--model DIR | --tokenizer FILE) [--text S]

Prints the token ids of S (or of everything read from stdin when --text is absent) as
  {"ids": [...]}
The text is taken byte for byte: a trailing newline from stdin is part of it.

options:
  --model DIR        use DIR/tokenizer.json
  --tokenizer FILE   use this tokenizer.json
  --text S           the text (default: stdin)
  --help             this text
)";

}  // namespace

int cmd_tokenize(const std::vector<std::string>& argv) {
  const Args args =
      Args::parse(argv, {{"model", true}, {"tokenizer", true}, {"text", true}, {"help", false}});
  if (args.has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (args.has("model") == args.has("tokenizer"))
    throw Error("give exactly one of --model DIR and --tokenizer FILE");
  const std::filesystem::path path =
      args.has("model") ? std::filesystem::path(args.required("model")) / "tokenizer.json"
                        : std::filesystem::path(args.required("tokenizer"));
  if (!std::filesystem::is_regular_file(path)) throw Error(cat(path, " not found"));
  const Tokenizer tokenizer = Tokenizer::load(path);
  const std::string text = args.has("text") ? args.required("text") : read_stdin();
  const nlohmann::json out = {{"ids", tokenizer.encode(text)}};
  std::cout << out.dump() << '\n';
  return kExitOk;
}

}  // namespace flide::cli
