// `flide bench` workloads (see workloads.h).
#include "workloads.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "cli_common.h"
#include "core/error.h"
#include "decide_request.h"
#include "tokenizer/tokenizer.h"

namespace flide::cli {

namespace {

constexpr SyntheticShape kSynthetic[] = {
    {"race_all", 450, 4, 50, 4},      {"race_one", 450, 1, 50, 4},
    {"quality_all", 5000, 18, 70, 4}, {"quality_one", 5000, 1, 70, 4},
    {"multirc_all", 330, 58, 35, 2},
};

constexpr int64_t kMaxSyntheticId = 200000;  // below every Qwen3.5 vocabulary's special tokens

Tree synthetic_tree(const SyntheticShape& shape, int64_t vocab_size, uint64_t seed) {
  const uint64_t range = uint64_t(std::min(vocab_size, kMaxSyntheticId));
  if (range < uint64_t(shape.labels))
    throw Error(cat("--workload ", shape.name, ": the vocabulary (", vocab_size,
                    ") is smaller than its ", shape.labels, " labels"));
  std::mt19937_64 rng(seed);  // fully specified by the standard: the same ids everywhere
  auto ids = [&](int32_t n) {
    std::vector<int32_t> out(static_cast<size_t>(n));
    for (int32_t& id : out) id = int32_t(rng() % range);
    return out;
  };
  Tree tree;
  tree.nodes.push_back(tree_node(-1, ids(shape.trunk_tokens)));
  for (int32_t q = 0; q < shape.questions; ++q) {
    TreeNode node = tree_node(0, ids(shape.question_tokens), ReadoutKind::ReadoutKind_choice);
    while (int32_t(node.label_ids.size()) < shape.labels) {
      const int32_t id = int32_t(rng() % range);
      if (std::find(node.label_ids.begin(), node.label_ids.end(), id) == node.label_ids.end())
        node.label_ids.push_back(id);
    }
    tree.nodes.push_back(std::move(node));
  }
  return tree;
}

// A round of the file's first `count` requests, starting over after its last line; its
// description, not its sizes.
BenchRound file_round(const std::filesystem::path& file, int64_t count, int64_t vocab_size,
                      const std::optional<std::filesystem::path>& tokenizer_json) {
  BenchRound round;
  std::string first_id;
  std::optional<Tokenizer> tokenizer;
  for (const auto& [number, line] : nonblank_lines(read_file(file))) {
    if (int64_t(round.trees.size()) == count) break;
    DecideRequest request;
    try {
      request = parse_decide_request(nlohmann::ordered_json::parse(line), vocab_size);
    } catch (const std::exception& e) {
      throw Error(cat("--workload ", file.string(), ": line ", number, ": ", e.what()));
    }
    if (request.is_text && !tokenizer) {
      if (!tokenizer_json)
        throw Error(cat("--workload ", file.string(), ": line ", number,
                        " is a text request and needs a tokenizer: give --model DIR or "
                        "--tokenizer FILE, or token-id requests"));
      if (!std::filesystem::exists(*tokenizer_json))
        throw Error(cat(*tokenizer_json, " not found; line ", number, " of ", file.string(),
                        " is a text request and needs the tokenizer"));
      tokenizer.emplace(Tokenizer::load(*tokenizer_json));
    }
    if (round.trees.empty())
      first_id = request.id.is_null() ? cat("line ", number) : request.id.dump();
    // Calibration shapes answers after the model runs: a bench round is the same without it.
    round.trees.push_back(
        decide_tree(request, tokenizer ? &*tokenizer : nullptr, DecisionCalibration{}));
  }
  if (round.trees.empty())
    throw Error(cat("--workload ", file.string(), ": no request (the file is empty)"));
  for (size_t i = 0; int64_t(round.trees.size()) < count; ++i)
    round.trees.push_back(round.trees[i]);
  round.description =
      count == 1 ? cat(file.filename().string(), " (request ", first_id, ")")
                 : cat(file.filename().string(), " (", count, " requests from ", first_id, ")");
  return round;
}

}  // namespace

WorkloadSpec parse_workload(const std::string& name) {
  for (const SyntheticShape& shape : kSynthetic)
    if (name == shape.name) return {shape, {}};
  if (std::filesystem::is_regular_file(name)) return {std::nullopt, name};
  std::string known;
  for (const SyntheticShape& shape : kSynthetic) known += cat(shape.name, ", ");
  throw Error(cat("--workload: \"", name, "\" is neither a workload (", known,
                  "or a FILE.jsonl) nor a readable file"));
}

BenchRound make_round(const WorkloadSpec& spec, int64_t batch, int64_t vocab_size, uint64_t seed,
                      const std::optional<std::filesystem::path>& tokenizer_json) {
  FLIDE_CHECK(batch >= 1);
  BenchRound round;
  if (spec.synthetic) {
    round.description = spec.synthetic->name;
    for (int64_t i = 0; i < batch; ++i)
      round.trees.push_back(synthetic_tree(*spec.synthetic, vocab_size, seed + uint64_t(i)));
  } else {
    round = file_round(spec.file, batch, vocab_size, tokenizer_json);
  }
  for (const Tree& tree : round.trees) {
    validate_tree(tree, vocab_size);
    round.trunk_tokens += int64_t(tree.nodes[0].tokens.size());
    for (size_t n = 1; n < tree.nodes.size(); ++n) {
      round.branch_tokens += int64_t(tree.nodes[n].tokens.size());
      round.questions += tree.nodes[n].parent == 0;
    }
  }
  return round;
}

}  // namespace flide::cli
