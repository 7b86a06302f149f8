// Forked and independent execution of decision trees, and the readout arithmetic shared by
// both: a choice is the softmax of the label logits (equal to the full softmax renormalised
// over the labels; divided by the node's temperature and shifted by its label biases first), a
// log-likelihood sums log-softmax entries over the node's own tokens.
#include "engine/executor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "engine/round_capacity.h"
#include "engine/stream_assembler.h"

namespace flide {

namespace {

// Where a tree node's readout lands in the round's ReadoutLogits.
struct PendingReadout {
  int32_t tree = 0;
  int32_t node = 0;
  int32_t first_selected = -1;                           // choice
  std::vector<std::pair<int32_t, int32_t>> full_target;  // loglik: (full row, target id)
};

// Registers node `n`'s readout; `seg` is the stream node holding n's tokens starting at token
// `start`; `pred_seg`/`pred_index` locate the row predicting n's first token (none for a root).
PendingReadout register_readout(StreamAssembler& sa, int32_t t, int32_t n, const TreeNode& node,
                                int32_t seg, int32_t start, int32_t pred_seg, int32_t pred_index) {
  PendingReadout r{t, n, -1, {}};
  const int32_t len = int32_t(node.tokens.size());
  if (node.readout == ReadoutKind::ReadoutKind_choice) {
    r.first_selected = sa.read_selected(seg, start + len - 1, node.label_ids);
  } else if (node.readout == ReadoutKind::ReadoutKind_loglik) {
    for (int32_t j = 0; j < len; ++j) {
      int32_t full = -1;
      if (j > 0)
        full = sa.read_full(seg, start + j - 1);
      else if (pred_seg >= 0)
        full = sa.read_full(pred_seg, pred_index);
      if (full >= 0) r.full_target.emplace_back(full, node.tokens[j]);
    }
  }
  return r;
}

// Readouts keep their tree's index into `trees`.
void forked_round(const std::vector<const Tree*>& trees, StreamAssembler& sa,
                  std::vector<PendingReadout>& pending) {
  for (int32_t t = 0; t < int32_t(trees.size()); ++t) {
    const Tree& tree = *trees[t];
    std::vector<int32_t> seg(tree.nodes.size());
    for (int32_t n = 0; n < int32_t(tree.nodes.size()); ++n) {
      const TreeNode& node = tree.nodes[n];
      seg[n] = sa.add_node(node.parent < 0 ? -1 : seg[node.parent], node.tokens);
    }
    for (int32_t n = 0; n < int32_t(tree.nodes.size()); ++n) {
      const TreeNode& node = tree.nodes[n];
      if (node.readout == ReadoutKind::ReadoutKind_none) continue;
      const int32_t p = node.parent;
      pending.push_back(register_readout(sa, t, n, node, seg[n], 0, p < 0 ? -1 : seg[p],
                                         p < 0 ? -1 : sa.node_length(seg[p]) - 1));
    }
  }
}

// Each root-to-leaf path as its own sequence; a readout is taken from the first path that
// contains its node. Paths that carry no new readout are not run.
void independent_round(const std::vector<const Tree*>& trees, StreamAssembler& sa,
                       std::vector<PendingReadout>& pending) {
  for (int32_t t = 0; t < int32_t(trees.size()); ++t) {
    const Tree& tree = *trees[t];
    const int32_t n_nodes = int32_t(tree.nodes.size());
    std::vector<bool> has_child(n_nodes, false), taken(n_nodes, false);
    for (const TreeNode& node : tree.nodes)
      if (node.parent >= 0) has_child[node.parent] = true;
    for (int32_t leaf = 0; leaf < n_nodes; ++leaf) {
      if (has_child[leaf]) continue;
      std::vector<int32_t> path;
      for (int32_t n = leaf; n >= 0; n = tree.nodes[n].parent) path.push_back(n);
      std::reverse(path.begin(), path.end());
      bool needed = false;
      for (int32_t n : path)
        needed |= !taken[n] && tree.nodes[n].readout != ReadoutKind::ReadoutKind_none;
      if (!needed) continue;

      std::vector<int32_t> tokens, start;
      for (int32_t n : path) {
        start.push_back(int32_t(tokens.size()));
        tokens.insert(tokens.end(), tree.nodes[n].tokens.begin(), tree.nodes[n].tokens.end());
      }
      const int32_t seg = sa.add_node(-1, std::move(tokens));
      for (size_t i = 0; i < path.size(); ++i) {
        const int32_t n = path[i];
        if (taken[n] || tree.nodes[n].readout == ReadoutKind::ReadoutKind_none) continue;
        taken[n] = true;
        pending.push_back(register_readout(sa, t, n, tree.nodes[n], seg, start[i],
                                           i == 0 ? -1 : seg, start[i] - 1));
      }
    }
  }
}

NodeResult compose(const Tree& tree, const PendingReadout& r, const ReadoutLogits& logits,
                   int64_t vocab, std::vector<double>& lse_cache) {
  NodeResult out;
  const TreeNode& node = tree.nodes[r.node];
  if (node.readout == ReadoutKind::ReadoutKind_choice) {
    const double* s = logits.selected.data() + r.first_selected;
    const size_t n = node.label_ids.size();
    // The calibrated logits, then their softmax, in place. Uncalibrated (T = 1, no bias) they
    // are s itself, bit for bit.
    out.probs.resize(n);
    for (size_t i = 0; i < n; ++i)
      out.probs[i] = s[i] / node.temperature + (node.label_bias.empty() ? 0.0 : node.label_bias[i]);
    const double top = *std::max_element(out.probs.begin(), out.probs.end());
    double total = 0.0;
    for (double& p : out.probs) total += p = std::exp(p - top);
    for (double& p : out.probs) p /= total;
    return out;
  }
  for (const auto& [row, target] : r.full_target) {
    const double* l = logits.full.data() + int64_t(row) * vocab;
    if (std::isnan(lse_cache[row])) {
      const double top = *std::max_element(l, l + vocab);
      double total = 0.0;
      for (int64_t v = 0; v < vocab; ++v) total += std::exp(l[v] - top);
      lse_cache[row] = top + std::log(total);
    }
    out.loglik_sum += l[target] - lse_cache[row];
  }
  if (!r.full_target.empty()) out.loglik_mean = out.loglik_sum / double(r.full_target.size());
  return out;
}

}  // namespace

int64_t stream_tokens(const Tree& tree, ExecMode mode) {
  int64_t total = 0;
  if (mode == ExecMode::ExecMode_fork) {
    for (const TreeNode& node : tree.nodes) total += int64_t(node.tokens.size());
    return total;
  }
  std::vector<bool> has_child(tree.nodes.size(), false);
  for (const TreeNode& node : tree.nodes)
    if (node.parent >= 0) has_child[size_t(node.parent)] = true;
  const std::vector<int64_t> paths = path_lengths(tree);
  for (size_t n = 0; n < paths.size(); ++n)
    if (!has_child[n]) total += paths[n];
  return total;
}

struct Executor::Round {
  std::vector<const Tree*> trees;       // the caller's, alive until the round is collected
  std::vector<PendingReadout> pending;  // none: nothing to read, nothing was run
  int64_t real_tokens = 0;
  int64_t padding = 0;
};

Executor::Executor(Model& model, RoundPolicy policy) : model_(model), policy_(policy) {}

Executor::~Executor() = default;

std::vector<TreeResult> Executor::run(const std::vector<Tree>& trees, ExecMode mode,
                                      RunStats* stats) {
  FLIDE_CHECK(in_flight_.empty(), "Executor::run with submitted rounds not collected");
  for (const Tree& tree : trees) validate_tree(tree, model_.info().vocab_size);

  std::vector<std::vector<int32_t>> rounds;
  if (policy_.max_round_tokens <= 0) {
    rounds.emplace_back(trees.size());
    for (size_t t = 0; t < trees.size(); ++t) rounds[0][t] = int32_t(t);
  } else {
    std::vector<int64_t> tokens;
    for (const Tree& tree : trees) tokens.push_back(stream_tokens(tree, mode));
    rounds = pack_rounds(tokens, policy_.max_round_tokens);
  }
  std::vector<TreeResult> results(trees.size());
  for (const std::vector<int32_t>& members : rounds) {
    std::vector<const Tree*> round;
    for (int32_t t : members) round.push_back(&trees[t]);
    submit_valid(std::move(round), mode);
    std::vector<TreeResult> done = collect(stats);
    for (size_t i = 0; i < members.size(); ++i) results[members[i]] = std::move(done[i]);
  }
  return results;
}

void Executor::submit(std::vector<const Tree*> trees, ExecMode mode) {
  for (const Tree* tree : trees) validate_tree(*tree, model_.info().vocab_size);
  submit_valid(std::move(trees), mode);
}

void Executor::submit_valid(std::vector<const Tree*> trees, ExecMode mode) {
  auto round = std::make_unique<Round>();
  round->trees = std::move(trees);
  StreamAssembler sa;
  if (mode == ExecMode::ExecMode_fork)
    forked_round(round->trees, sa, round->pending);
  else
    independent_round(round->trees, sa, round->pending);
  if (!round->pending.empty()) {
    Stream stream = sa.finish();
    round->real_tokens = stream.n_tokens();
    if (policy_.pad_to_buckets)
      if (const auto cap = capacity_for(stream, policy_.max_bucket_tokens))
        stream = pad_stream(stream, *cap);
    round->padding = stream.n_tokens() - round->real_tokens;
    model_.submit(stream);
  }
  in_flight_.push_back(std::move(round));
}

std::vector<TreeResult> Executor::collect(RunStats* stats) {
  FLIDE_CHECK(!in_flight_.empty(), "collect without a submitted round");
  const std::unique_ptr<Round> round = std::move(in_flight_.front());
  in_flight_.pop_front();
  std::vector<TreeResult> results(round->trees.size());
  for (size_t t = 0; t < results.size(); ++t)
    results[t].nodes.resize(round->trees[t]->nodes.size());
  if (round->pending.empty()) return results;

  const ReadoutLogits logits = model_.collect();
  if (stats) {
    stats->tokens_computed += round->real_tokens;
    stats->tokens_padding += round->padding;
    stats->rounds += 1;
  }
  const int64_t vocab = model_.info().vocab_size;
  std::vector<double> lse_cache(logits.full.size() / size_t(vocab),  // one per full row
                                std::numeric_limits<double>::quiet_NaN());
  for (const PendingReadout& r : round->pending)
    results[r.tree].nodes[r.node] = compose(*round->trees[r.tree], r, logits, vocab, lse_cache);
  return results;
}

}  // namespace flide
