// Device-side view of a round's flat stream (backend/stream.h), as plain pointers so that
// kernels depend on nothing in src/. The CUDA backend uploads a Stream into buffers sized for
// its capacity and hands kernels this struct by value. Node ranges of a tree level are read from
// level_begin on the device, so a launch's shape never depends on the round's data.
#pragma once

#include <cstdint>

namespace flide::kernels {

struct TreeMeta {
  const int32_t* token_node;     // [T] node of each row
  const int32_t* positions;      // [T] position id of each row
  const int32_t* node_parent;    // [N] -1 for a root
  const int32_t* node_offset;    // [N] first row
  const int32_t* node_length;    // [N] rows
  const int32_t* node_slot_in;   // [N] state slot to start from, -1: zeros
  const int32_t* node_slot_out;  // [N] slot to write, -1: none
  const int32_t* level_begin;    // [L+1] nodes of level l: [level_begin[l], level_begin[l+1])
  const int32_t* path_begin;     // [N+1] node n's path (root first, n last) is
  const int32_t* path_nodes;     //       path_nodes[path_begin[n] .. path_begin[n+1])
  const int32_t* out_rows;       // [R] stream rows read by the last layer / LM head
  int32_t n_tokens;              // T
  int32_t n_nodes;               // N
  int32_t max_level_nodes;       // upper bound of nodes in any one level (grid sizing)
  int32_t max_node_length;       // upper bound of any node's length (grid sizing)
};

}  // namespace flide::kernels
