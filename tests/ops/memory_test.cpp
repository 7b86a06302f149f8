// The backend's memory and bookkeeping: the persistent arena (zeroed, stable, non-overlapping),
// the scratch arena (rewound and merged by reset_scratch), host transfers, stream validation
// and argument checks.
#include <cstdint>
#include <random>

#include "core/error.h"
#include "ops_test_util.h"

namespace flide::test {
namespace {

class MemoryTest : public ::testing::TestWithParam<DType> {};

TEST_P(MemoryTest, DtypeAndFactory) {
  EXPECT_EQ(make_cpu_ops(GetParam(), 1)->dtype(), GetParam());
  EXPECT_EQ(make_cpu_ops(GetParam(), 0)->dtype(), GetParam());  // threads <= 0: default
  EXPECT_THROW(make_cpu_ops(DType::DType_bf16, 1), Error);
}

TEST_P(MemoryTest, AllocIsZeroedStableAndDisjoint) {
  Device dev(GetParam());
  std::mt19937 gen(fresh_seed(7));
  std::vector<View> views;
  std::vector<std::vector<float>> contents;
  // Small pieces that fill several shared blocks, plus a few dedicated large blocks.
  for (int i = 0; i < 600; ++i) {
    const bool large = i % 100 == 99;  // above half a block for both dtypes
    const int64_t rows = large ? 1 : 1 + i % 7, cols = large ? 9 << 20 : 1 + (i * 37) % 4001;
    View v = dev.ops().alloc(rows, cols);
    ASSERT_NE(v.data, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 16, 0u);
    if (!large) {
      for (double x : dev.get(v)) ASSERT_EQ(x, 0.0);
      contents.push_back(random_floats(gen, v.size(), -1, 1));
      dev.ops().upload(v, contents.back().data());
      views.push_back(v);
    }
  }
  for (size_t i = 0; i < views.size(); ++i)  // nothing moved, nothing overwritten
    ASSERT_EQ(rel_err(dev.get(views[i]), widen(contents[i])), 0.0) << "view " << i;
  View empty = dev.ops().alloc(0, 5);
  EXPECT_EQ(empty.size(), 0);
}

TEST_P(MemoryTest, UploadDownloadFillZero) {
  Device dev(GetParam());
  std::mt19937 gen(fresh_seed(8));
  const auto x = random_floats(gen, 3 * 41, -1e3, 1e3);
  View v = dev.put(3, 41, x);
  EXPECT_EQ(rel_err(dev.get(v), widen(x)), 0.0);  // float -> f32/f64 -> double is exact
  dev.ops().fill_zero(v);
  for (double d : dev.get(v)) EXPECT_EQ(d, 0.0);
}

TEST_P(MemoryTest, ScratchRewindsAndMerges) {
  Device dev(GetParam());
  std::mt19937 gen(fresh_seed(9));
  const auto kept = random_floats(gen, 1000, -1, 1);
  View persistent = dev.put(10, 100, kept);
  // A round that needs several blocks (the first block holds 64 MiB).
  const int64_t big = (int64_t(48) << 20) / int64_t(GetParam() == DType::DType_f64 ? 8 : 4);
  std::vector<int64_t> sizes = {big, 1000, big, 17, big / 3, 5};
  auto round = [&](std::vector<View>& views) {
    views.clear();
    for (int64_t n : sizes) views.push_back(dev.ops().scratch(1, n));
  };
  std::vector<View> first, second;
  round(first);
  // Small pieces are disjoint and writable.
  View a = first[1], b = first[3], c = first[5];
  const auto xa = random_floats(gen, a.size(), -1, 1), xb = random_floats(gen, b.size(), -1, 1),
             xc = random_floats(gen, c.size(), -1, 1);
  dev.ops().upload(a, xa.data());
  dev.ops().upload(b, xb.data());
  dev.ops().upload(c, xc.data());
  EXPECT_EQ(rel_err(dev.get(a), widen(xa)), 0.0);
  EXPECT_EQ(rel_err(dev.get(b), widen(xb)), 0.0);
  EXPECT_EQ(rel_err(dev.get(c), widen(xc)), 0.0);
  for (int r = 0; r < 3; ++r) {  // later rounds fit in the single merged block
    dev.ops().reset_scratch();
    round(second);
    auto lo = static_cast<char*>(second[0].data);
    for (size_t i = 1; i < second.size(); ++i) {
      auto p = static_cast<char*>(second[i].data);
      EXPECT_GT(p, lo) << "round " << r << " piece " << i;
      EXPECT_LT(p - lo, int64_t(4) * big * 8) << "round " << r << " piece " << i;
    }
  }
  EXPECT_EQ(rel_err(dev.get(persistent), widen(kept)), 0.0);
}

// A layer's temporaries are released by rewinding to a mark. When the arena grew inside the
// layer, the next layer must carve the grown block again, not grow once more: over many layers
// the same working set fits in the blocks of the first one.
TEST_P(MemoryTest, RewindAfterGrowthReusesTheNewBlock) {
  Device dev(GetParam());
  const View kept = dev.ops().scratch(1, 16);
  std::vector<std::vector<const void*>> layers;
  for (int layer = 0; layer < 12; ++layer) {
    const ScratchMark mark = dev.ops().scratch_mark();
    std::vector<const void*> pieces;
    for (int i = 0; i < 4; ++i) pieces.push_back(dev.ops().scratch(1024, 8192).data);  // 4 x 32+ MB
    layers.push_back(pieces);
    dev.ops().scratch_rewind(mark);
  }
  for (size_t l = 6; l < layers.size(); ++l) EXPECT_EQ(layers[l], layers[5]) << "layer " << l;
  dev.ops().reset_scratch();
  EXPECT_NE(kept.data, nullptr);
}

TEST_P(MemoryTest, StreamValidation) {
  Device dev(GetParam());
  std::mt19937 gen(fresh_seed(10));
  const std::vector<NodeSpec> spec = {{-1, 3}, {0, 2}, {0, 4}};
  Stream ok = build_stream(spec, 0, gen);
  EXPECT_NO_THROW(dev.ops().set_stream(ok));
  Stream two_writers = ok;  // siblings writing one slot
  two_writers.nodes[1].slot_out = two_writers.nodes[2].slot_out = 1;
  two_writers.n_slots = 2;
  EXPECT_THROW(dev.ops().set_stream(two_writers), Error);
  Stream read_while_written = ok;  // a sibling overwriting the slot the other one reads
  read_while_written.nodes[1].slot_out = read_while_written.nodes[1].slot_in;
  EXPECT_THROW(dev.ops().set_stream(read_while_written), Error);
  Stream bad_rows = ok;
  bad_rows.token_node[0] = 1;
  EXPECT_THROW(dev.ops().set_stream(bad_rows), Error);
  Stream bad_level = ok;
  bad_level.nodes[2].level = 0;
  EXPECT_THROW(dev.ops().set_stream(bad_level), Error);
}

TEST_P(MemoryTest, ShapeChecks) {
  Device dev(GetParam());
  View x = dev.ops().alloc(3, 4), w = dev.ops().alloc(5, 6), out = dev.ops().alloc(3, 5);
  EXPECT_THROW(dev.ops().matmul(x, w, out), Error);
  EXPECT_THROW(dev.ops().rmsnorm(x, w, x, 1e-6, true), Error);
  View w4 = dev.ops().alloc(5, 4);
  EXPECT_NO_THROW(dev.ops().matmul_add(x, w4, out));
  EXPECT_THROW(dev.ops().matmul_add(x, w, out), Error);                     // w's shape
  EXPECT_THROW(dev.ops().matmul_add(x, w4, dev.ops().alloc(3, 4)), Error);  // acc's shape
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MemoryTest, ::testing::Values(DType::DType_f32, DType::DType_f64),
                         [](const auto& info) { return dtype_label(info.param); });

}  // namespace
}  // namespace flide::test
