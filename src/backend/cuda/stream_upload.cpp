// CudaOps::set_stream: the round's metadata on the device (DESIGN.md "A round is a flat
// stream"). The Stream is validated once here (the kernels index it without checks, so a bad
// index would be a silent out-of-bounds read), the ancestor paths and grid bounds are derived
// on the host, the two tree-attention plans are built (STYLE.md #5: plan on the host, run on
// the device), and everything is laid out in one pinned buffer that goes to the device in a
// single cudaMemcpyAsync on the backend stream. Buffers grow geometrically and are reused.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "kernels/attention.h"

namespace flide {

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kMinMetaBytes = size_t(1) << 20;

size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

void CudaOps::set_stream(const Stream& s) {
  have_stream_ = false;  // until this round's metadata is in place
  graph_abandon();       // a capture left open by a round that failed
  norm_fp8_ = {};        // no norm of this round has written its FP8 form yet
  product_fp8_ = {};     // nor any product's input
  validate_stream(s);
  const int32_t T = s.n_tokens(), N = int32_t(s.nodes.size()), L = s.n_levels();
  const int32_t R = int32_t(s.out_rows.size()), M = int32_t(s.select_ids.size());
  // Sizes of the buffers and grids: a padded round's come from its bucket alone (node capacity,
  // paths of at most L nodes, any node up to T rows), so that its graph's addresses and launch
  // shapes hold for every round of the bucket.
  const bool padded = s.padded();
  const int32_t N_cap = padded ? s.node_capacity : N;

  // Ancestor paths (root first, the node last) and the grid bounds of this round.
  std::vector<int32_t> path_begin, path_nodes;
  ancestor_paths(s, path_begin, path_nodes);
  const int64_t path_cap = padded ? int64_t(N_cap) * L : int64_t(path_nodes.size());
  int32_t max_level_nodes = N_cap, max_node_length = T;
  if (!padded) {  // the round's own bounds
    max_level_nodes = max_node_length = 0;
    for (int32_t n = 0; n < N; ++n) max_node_length = std::max(max_node_length, s.nodes[n].length);
    for (int32_t l = 0; l < L; ++l)
      max_level_nodes = std::max(max_level_nodes, s.level_begin[l + 1] - s.level_begin[l]);
  }

  // Layout of the one buffer: int32 arrays, then the plans, each piece 256-byte aligned.
  size_t end = 0;
  auto piece = [&](size_t bytes) {
    const size_t at = end;
    end = align_up(end + bytes);
    return at;
  };
  auto ints = [&](int64_t n) { return piece(size_t(std::max<int64_t>(n, 0)) * sizeof(int32_t)); };
  const size_t o_token_ids = ints(T), o_positions = ints(T), o_token_node = ints(T);
  const size_t o_parent = ints(N_cap), o_offset = ints(N_cap), o_length = ints(N_cap);
  const size_t o_slot_in = ints(N_cap), o_slot_out = ints(N_cap), o_level_begin = ints(L + 1);
  const size_t o_path_begin = ints(N_cap + 1), o_path_nodes = ints(path_cap);
  const size_t o_out_rows = ints(R), o_select_out = ints(M), o_select_ids = ints(M);
  const size_t plan_all_cap = T > 0 ? kernels::attention_plan_bytes(T, N_cap) : 0;
  const size_t plan_out_cap = R > 0 ? kernels::attention_plan_bytes(R, N_cap) : 0;
  const size_t o_plan_all = piece(plan_all_cap), o_plan_out = piece(plan_out_cap);
  const size_t total = end;

  // The previous round's copy must have left the pinned buffer before it is rewritten.
  cuda_check(cudaEventSynchronize(meta_done_), "set_stream (an earlier op failed)");
  if (total > meta_cap_) {
    // The device buffer may still be read by queued kernels of the previous round.
    cuda_check(cudaStreamSynchronize(stream_), "set_stream (an earlier op failed)");
    if (meta_dev_) cuda_check(cudaFree(meta_dev_), "set_stream: cudaFree");
    if (meta_host_) cuda_check(cudaFreeHost(meta_host_), "set_stream: cudaFreeHost");
    const size_t cap = std::max({total, 2 * meta_cap_, kMinMetaBytes});
    ++memory_epoch_;
    meta_dev_ = meta_host_ = nullptr;
    meta_cap_ = 0;
    cuda_check(cudaMallocHost(&meta_host_, cap), "set_stream: pinned metadata buffer");
    cuda_check(cudaMalloc(&meta_dev_, cap), "set_stream: device metadata buffer");
    meta_cap_ = cap;
  }

  char* host = static_cast<char*>(meta_host_);
  auto at = [&](size_t o) { return reinterpret_cast<int32_t*>(host + o); };
  auto put = [&](size_t o, const std::vector<int32_t>& v) {
    if (!v.empty()) std::memcpy(host + o, v.data(), v.size() * sizeof(int32_t));
  };
  put(o_token_ids, s.token_ids);
  put(o_positions, s.positions);
  put(o_token_node, s.token_node);
  for (int32_t n = 0; n < N; ++n) {
    const StreamNode& node = s.nodes[n];
    at(o_parent)[n] = node.parent;
    at(o_offset)[n] = node.offset;
    at(o_length)[n] = node.length;
    at(o_slot_in)[n] = node.slot_in;
    at(o_slot_out)[n] = node.slot_out;
  }
  put(o_level_begin, s.level_begin);
  put(o_path_begin, path_begin);
  put(o_path_nodes, path_nodes);
  put(o_out_rows, s.out_rows);
  put(o_select_out, s.select_out);
  put(o_select_ids, s.select_ids);

  // Node slots past the round's nodes (a padded round) are never read: zeros keep them defined.
  for (size_t o : {o_parent, o_offset, o_length, o_slot_in, o_slot_out})
    std::fill(at(o) + N, at(o) + N_cap, 0);
  std::fill(at(o_path_begin) + N + 1, at(o_path_begin) + N_cap + 1, path_begin.back());

  // The plans cover the real query rows only (padding is at the tail of both row sets). A
  // padded round launches for the bound of its bucket; CTAs past the plan's tiles return.
  const kernels::HostTree tree{at(o_parent), at(o_offset), at(o_length), at(o_token_node), N, T};
  const int32_t real_all = T - s.pad_tokens, real_out = R - s.pad_out;
  tiles_all_ = tiles_out_ = 0;
  size_t copy_bytes = o_plan_all;
  if (T > 0) {
    const size_t used =
        kernels::build_attention_plan(tree, nullptr, real_all, host + o_plan_all, &tiles_all_);
    FLIDE_CHECK(used > 0 && used <= plan_all_cap, "attention plan (all rows) out of bounds");
    copy_bytes = o_plan_all + used;
    if (padded) tiles_all_ = int32_t(kernels::attention_max_tiles(T, N_cap));
  }
  if (R > 0) {
    const size_t used = kernels::build_attention_plan(tree, at(o_out_rows), real_out,
                                                      host + o_plan_out, &tiles_out_);
    FLIDE_CHECK(used > 0 && used <= plan_out_cap, "attention plan (out rows) out of bounds");
    copy_bytes = o_plan_out + used;
    if (padded) tiles_out_ = int32_t(kernels::attention_max_tiles(R, N_cap));
  }
  if (copy_bytes > 0)
    cuda_check(cudaMemcpyAsync(meta_dev_, meta_host_, copy_bytes, cudaMemcpyHostToDevice, stream_),
               "set_stream: cudaMemcpyAsync");
  cuda_check(cudaEventRecord(meta_done_, stream_), "set_stream: cudaEventRecord");

  const char* dev = static_cast<const char*>(meta_dev_);
  auto dev_ints = [&](size_t o) { return reinterpret_cast<const int32_t*>(dev + o); };
  meta_ = kernels::TreeMeta{};
  meta_.token_node = dev_ints(o_token_node);
  meta_.positions = dev_ints(o_positions);
  meta_.node_parent = dev_ints(o_parent);
  meta_.node_offset = dev_ints(o_offset);
  meta_.node_length = dev_ints(o_length);
  meta_.node_slot_in = dev_ints(o_slot_in);
  meta_.node_slot_out = dev_ints(o_slot_out);
  meta_.level_begin = dev_ints(o_level_begin);
  meta_.path_begin = dev_ints(o_path_begin);
  meta_.path_nodes = dev_ints(o_path_nodes);
  meta_.out_rows = dev_ints(o_out_rows);
  meta_.n_tokens = T;
  meta_.n_nodes = N_cap;
  meta_.max_level_nodes = max_level_nodes;
  meta_.max_node_length = max_node_length;
  token_ids_ = dev_ints(o_token_ids);
  select_out_ = dev_ints(o_select_out);
  select_ids_ = dev_ints(o_select_ids);
  plan_all_ = dev + o_plan_all;
  plan_out_ = dev + o_plan_out;

  n_levels_ = L;
  n_slots_ = s.n_slots;
  padded_ = padded;
  window_in_place_ = std::any_of(s.nodes.begin(), s.nodes.end(), [](const StreamNode& n) {
    return n.slot_in >= 0 && n.slot_in == n.slot_out;
  });
  n_out_ = R;
  n_select_ = M;
  max_token_id_ =
      s.token_ids.empty() ? -1 : *std::max_element(s.token_ids.begin(), s.token_ids.end());
  max_select_id_ =
      s.select_ids.empty() ? -1 : *std::max_element(s.select_ids.begin(), s.select_ids.end());
  have_stream_ = true;
  graph_round_begin(s);
}

}  // namespace flide
