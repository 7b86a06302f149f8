// `flide logits`: the full-vocabulary logits of one token sequence, for checking the model
// against a reference (HF transformers) from the shell. It builds the flat stream itself (one
// root node, no tree), because a Tree readout returns only label distributions.
#include <charconv>
#include <iostream>
#include <nlohmann/json.hpp>

#include "args.h"
#include "cli_common.h"
#include "commands.h"
#include "core/error.h"

namespace flide::cli {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kUsage = R"(usage: flide logits --model DIR --ids 1,2,3 [options]

Runs the model on one token sequence and prints the next-token logits after its last token
  {"ids": [...], "logits": [V numbers]}
or, with --all, after every position
  {"ids": [...], "logits": [[V numbers], ...]}
Numbers are printed with enough digits to read back exactly.

options:
  --model DIR       model directory (config.json, safetensors)
  --ids LIST        comma-separated token ids
  --all             logits at every position, not only the last
  --device cpu|cuda where to compute (default: cpu; cuda: GPU 0)
  --dtype f32|f64|bf16
                    compute type: f32 (default) or f64 on cpu, bf16 (the only one) on cuda
  --threads N       CPU threads (default: all cores; cpu only)
  --help            this text
)";

// Syntax only: the vocabulary bound is checked once the model is loaded.
std::vector<int32_t> parse_ids(const std::string& list) {
  std::vector<int32_t> ids;
  for (const std::string& item : split_list(list)) {
    int32_t id = -1;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || id < 0)
      throw Error(cat("--ids: \"", item, "\" is not a token id"));
    ids.push_back(id);
  }
  return ids;
}

// One root node holding every token; the out rows (last, or all) all need the full vocabulary.
Stream sequence_stream(const std::vector<int32_t>& ids, bool all_rows) {
  const int32_t n = int32_t(ids.size());
  Stream stream;
  stream.token_ids = ids;
  for (int32_t t = 0; t < n; ++t) {
    stream.positions.push_back(t);
    stream.token_node.push_back(0);
  }
  stream.nodes.push_back({-1, 0, n, 0, -1, -1});
  stream.level_begin = {0, 1};
  for (int32_t t = all_rows ? 0 : n - 1; t < n; ++t) stream.out_rows.push_back(t);
  stream.n_full_out = int32_t(stream.out_rows.size());
  return stream;
}

}  // namespace

int cmd_logits(const std::vector<std::string>& argv) {
  const Args args = Args::parse(argv, {{"model", true},
                                       {"ids", true},
                                       {"all", false},
                                       {"device", true},
                                       {"dtype", true},
                                       {"threads", true},
                                       {"help", false}});
  if (args.has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  const std::string model_dir = args.required("model");
  const std::string id_list = args.required("ids");
  const BackendChoice backend =
      parse_backend(args.value("device"), args.value("dtype"), args.value("threads"));
  const bool all_rows = args.has("all");
  const std::vector<int32_t> ids = parse_ids(id_list);

  LoadedModel loaded = load_model_on(model_dir, backend);
  const int64_t vocab_size = loaded.model->info().vocab_size;
  for (int32_t id : ids)
    if (id >= vocab_size)
      throw Error(cat("--ids: token id ", id, " outside the vocabulary [0, ", vocab_size, ")"));
  const Stream stream = sequence_stream(ids, all_rows);
  const ReadoutLogits logits = loaded.model->forward(stream);
  const size_t rows = stream.out_rows.size();
  FLIDE_CHECK(logits.full.size() == rows * size_t(vocab_size), "got ", logits.full.size(),
              " logits for ", rows, " rows of ", vocab_size);

  json out = {{"ids", ids}};
  auto row = [&](size_t r) {
    return std::vector<double>(logits.full.begin() + std::ptrdiff_t(r * vocab_size),
                               logits.full.begin() + std::ptrdiff_t((r + 1) * vocab_size));
  };
  if (all_rows) {
    json per_position = json::array();
    for (size_t r = 0; r < rows; ++r) per_position.push_back(row(r));
    out["logits"] = std::move(per_position);
  } else {
    out["logits"] = row(0);
  }
  std::cout << out.dump() << '\n';
  return kExitOk;
}

}  // namespace flide::cli
