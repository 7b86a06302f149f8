// The flat stream's layout: nodes by level, positions continuing from the parent, slots only
// for parents, readout rows with full-vocabulary rows first and every row once.
#include "engine/stream_assembler.h"

#include <gtest/gtest.h>

namespace flide {
namespace {

TEST(StreamAssembler, OrdersByLevelAndForksState) {
  StreamAssembler sa;
  int32_t trunk_a = sa.add_node(-1, {1, 2, 3});
  int32_t q1 = sa.add_node(trunk_a, {4, 5});
  int32_t trunk_b = sa.add_node(-1, {6});
  int32_t q1_child = sa.add_node(q1, {7});
  int32_t q2 = sa.add_node(trunk_a, {8, 9, 10});
  int32_t first = sa.read_selected(q2, 2, {11, 12});
  int32_t full_a = sa.read_full(q1_child, 0);
  int32_t full_b = sa.read_full(q1, 1);
  EXPECT_EQ(sa.read_full(q1_child, 0), full_a);  // the same row is read once
  sa.read_selected(q1, 1, {13});                 // a row both full and selected
  (void)trunk_b;
  Stream s = sa.finish();

  EXPECT_EQ(s.token_ids, (std::vector<int32_t>{1, 2, 3, 6, 4, 5, 8, 9, 10, 7}));
  EXPECT_EQ(s.positions, (std::vector<int32_t>{0, 1, 2, 0, 3, 4, 3, 4, 5, 5}));
  EXPECT_EQ(s.level_begin, (std::vector<int32_t>{0, 2, 4, 5}));
  ASSERT_EQ(s.nodes.size(), 5u);
  EXPECT_EQ(s.nodes[0].slot_out, 0);   // trunk a has children
  EXPECT_EQ(s.nodes[1].slot_out, -1);  // trunk b has none
  EXPECT_EQ(s.nodes[2].slot_in, 0);    // q1 starts from trunk a
  EXPECT_EQ(s.nodes[2].slot_out, 1);   // and has a child
  EXPECT_EQ(s.nodes[3].slot_in, 0);    // q2
  EXPECT_EQ(s.nodes[4].slot_in, 1);    // q1's child
  EXPECT_EQ(s.nodes[4].parent, 2);
  EXPECT_EQ(s.n_slots, 2);

  ASSERT_EQ(s.n_full_out, 2);
  EXPECT_EQ(s.out_rows[full_a], 9);
  EXPECT_EQ(s.out_rows[full_b], 5);
  EXPECT_EQ(s.out_rows.size(), 3u);  // row 5 is shared by a full and a selected readout
  EXPECT_EQ(s.out_rows[s.select_out[first]], 8);
  EXPECT_EQ(s.select_ids, (std::vector<int32_t>{11, 12, 13}));
  EXPECT_EQ(s.out_rows[s.select_out[2]], 5);
}

}  // namespace
}  // namespace flide
