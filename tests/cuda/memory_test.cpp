// The CUDA backend's memory and bookkeeping: the factory and its errors, the persistent arena
// (zeroed, stable, disjoint), the scratch arena (rewound and merged by reset_scratch, the same
// layout once merged), host transfers through the pinned chunks (bf16 rounding to nearest
// even, f32 exact, uploads larger than a chunk), dtype and shape checks, stream validation.
#include <cstdint>
#include <random>

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace flide::test {
namespace {

class CudaMemory : public CudaTest {};

TEST(CudaFactory, NamesTheProblem) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    try {
      make_cuda_ops(0);
      ADD_FAILURE() << "make_cuda_ops succeeded without a device";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
    }
    return;
  }
  try {
    make_cuda_ops(count);
    ADD_FAILURE() << "make_cuda_ops(" << count << ") succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cuda_ops(-1), Error);
  auto ops = make_cuda_ops(0);
  EXPECT_EQ(ops->dtype(), DType::DType_bf16);
  const std::string line = static_cast<CudaOps&>(*ops).describe();
  EXPECT_FALSE(line.empty());
  CudaReport::lines().push_back("device: " + line);
}

TEST_F(CudaMemory, AllocIsZeroedStableAndDisjoint) {
  auto ops = make_cuda_ops(0);
  std::mt19937 gen(7);
  std::vector<View> views;
  std::vector<std::vector<float>> contents;
  // Small pieces over several 256 MiB blocks' worth of calls, plus dedicated large blocks.
  for (int i = 0; i < 400; ++i) {
    const bool large = i % 100 == 99;  // 160 MiB of bf16: above half a block
    const int64_t rows = large ? 1 : 1 + i % 7,
                  cols = large ? int64_t(80) << 20 : 1 + (i * 37) % 4001;
    View v = ops->alloc(rows, cols);
    ASSERT_NE(v.data, nullptr);
    EXPECT_EQ(v.dtype, DType::DType_bf16);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 256, 0u);
    Vec back(static_cast<size_t>(v.size()));
    ops->download(v, back.data());
    for (double x : back) ASSERT_EQ(x, 0.0) << "alloc " << i << " is not zeroed";
    if (!large) {
      contents.push_back(rounded_bf16(random_floats(gen, v.size(), -1, 1)));
      ops->upload(v, contents.back().data());
      views.push_back(v);
    }
  }
  for (size_t i = 0; i < views.size(); ++i) {  // nothing moved, nothing overwritten
    Vec back(static_cast<size_t>(views[i].size()));
    ops->download(views[i], back.data());
    ASSERT_EQ(first_difference(back, widen(contents[i])), -1) << "view " << i;
  }
  EXPECT_EQ(ops->alloc(0, 5).size(), 0);
}

TEST_F(CudaMemory, UploadRoundsToNearestEvenAndDownloadIsExact) {
  auto ops = make_cuda_ops(0);
  std::mt19937 gen(8);
  // More than one 4M-float staging chunk, to cross chunk boundaries in both directions.
  const int64_t n = (int64_t(4) << 20) * 2 + 12345;
  std::vector<float> x = random_floats(gen, n, -1e3, 1e3);
  x[0] = 1.0f + 1.0f / 256;  // a tie: rounds to even (1.0)
  x[1] = 1.0f + 3.0f / 256;  // a tie: rounds to even (1 + 4/256)
  x[2] = -0.0f;
  x[3] = 3.0e38f;  // large but finite in bf16 (its largest is 3.39e38)
  View v = ops->alloc(1, n);
  ops->upload(v, x.data());
  Vec back(static_cast<size_t>(n));
  ops->download(v, back.data());
  std::vector<float> want = rounded_bf16(x);
  EXPECT_EQ(first_difference(back, widen(want)), -1);
  EXPECT_EQ(back[0], 1.0);
  EXPECT_EQ(back[1], 1.0 + 4.0 / 256);

  View f = ops->scratch_f32(3, n / 3);
  EXPECT_EQ(f.dtype, DType::DType_f32);
  ops->upload(f, x.data());
  Vec back_f(static_cast<size_t>(f.size()));
  ops->download(f, back_f.data());
  EXPECT_EQ(first_difference(back_f, Vec(x.begin(), x.begin() + f.size())), -1);

  ops->fill_zero(v);
  ops->fill_zero(f);
  ops->download(v, back.data());
  ops->download(f, back_f.data());
  for (double d : back) ASSERT_EQ(d, 0.0);
  for (double d : back_f) ASSERT_EQ(d, 0.0);
}

TEST_F(CudaMemory, ScratchRewindsMergesAndKeepsItsLayout) {
  auto ops = make_cuda_ops(0);
  std::mt19937 gen(9);
  const auto kept = rounded_bf16(random_floats(gen, 1000, -1, 1));
  View persistent = ops->alloc(10, 100);
  ops->upload(persistent, kept.data());
  // A round that needs several blocks (the first scratch block holds 64 MiB).
  const int64_t big = int64_t(24) << 20;  // 48 MiB of bf16
  const std::vector<std::pair<int64_t, bool>> sizes = {{big, false}, {1000, false}, {big / 2, true},
                                                       {17, true},   {big, false},  {5, false}};
  auto round = [&](std::vector<View>& views) {
    views.clear();
    for (const auto& [n, f32] : sizes)
      views.push_back(f32 ? ops->scratch_f32(1, n) : ops->scratch(1, n));
  };
  std::vector<View> first, second, third;
  round(first);
  for (const View& v : first) {  // every piece is writable and keeps its data within the round
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 256, 0u);
    const auto data = rounded_bf16(random_floats(gen, v.size(), -1, 1));
    ops->upload(v, data.data());
    Vec back(static_cast<size_t>(v.size()));
    ops->download(v, back.data());
    ASSERT_EQ(first_difference(back, widen(data)), -1);
  }
  ops->reset_scratch();
  round(second);
  ops->reset_scratch();
  round(third);
  for (size_t i = 0; i < sizes.size(); ++i)  // merged into one block: same layout every round
    EXPECT_EQ(second[i].data, third[i].data) << "piece " << i;
  Vec back(1000);
  ops->download(persistent, back.data());
  EXPECT_EQ(first_difference(back, widen(kept)), -1);
}

TEST_F(CudaMemory, ChecksDtypesShapesAndTheStream) {
  auto ops = make_cuda_ops(0);
  View x = ops->alloc(4, 8), w = ops->alloc(3, 8), out = ops->alloc(4, 3);
  View f = ops->scratch_f32(4, 8);
  EXPECT_THROW(ops->matmul(f, w, out), Error);               // f32 input
  EXPECT_THROW(ops->matmul(x, w, ops->alloc(4, 4)), Error);  // shape
  EXPECT_NO_THROW(ops->matmul(x, w, ops->scratch_f32(4, 3)));
  EXPECT_THROW(ops->matmul_add(f, w, out), Error);               // f32 input
  EXPECT_THROW(ops->matmul_add(x, w, ops->alloc(3, 3)), Error);  // shape
  EXPECT_NO_THROW(ops->matmul_add(x, w, ops->scratch_f32(4, 3)));
  EXPECT_THROW(ops->rmsnorm(f, ops->alloc(1, 8), f, 1e-6, true), Error);
  View ab = ops->alloc(4, 4), g = ops->alloc(4, 2);
  EXPECT_THROW(ops->gdn_gates(ab, ops->alloc(1, 2), ops->alloc(1, 2), g, g), Error);  // bf16 g
  EXPECT_THROW(ops->embed(ops->alloc(10, 8), x), Error);  // no stream yet
  EXPECT_THROW(ops->gather_rows(x, x), Error);

  std::mt19937 gen(1);
  Stream s = build_stream(tree_cases()[2].nodes, 0, gen, 10);
  Stream bad = s;
  bad.token_node[3] = 5;  // row 3 claims a node it is not in
  EXPECT_THROW(ops->set_stream(bad), Error);
  bad = s;
  bad.token_ids[0] = -1;
  EXPECT_THROW(ops->set_stream(bad), Error);
  ops->set_stream(s);
  EXPECT_THROW(ops->embed(ops->alloc(5, 8), ops->alloc(s.n_tokens(), 8)), Error);  // id >= 5
  const int64_t T = s.n_tokens();
  View qkv = ops->alloc(T, 8), conv_w = ops->alloc(8, 4);
  View window = ops->alloc(std::max(s.n_slots, 1), 24);
  View q = ops->alloc(T, 2), k = ops->alloc(T, 2), v = ops->alloc(T, 4);
  EXPECT_THROW(ops->gdn_conv(qkv, conv_w, window, q, k, v, 2, 1e-6, s.n_levels()),
               Error);  // no such level
  EXPECT_THROW(ops->gdn_conv(qkv, conv_w, window, q, k, ops->alloc(T, 3), 2, 1e-6, 0),
               Error);  // x is not [q | k | v]
  EXPECT_THROW(ops->gdn_conv(qkv, conv_w, window, q, k, v, 4, 1e-6, 0), Error);  // dim_k > Kd
  EXPECT_THROW(
      ops->gdn_conv(qkv, conv_w, window, View{qkv.data, T, 2, qkv.dtype}, k, v, 2, 1e-6, 0),
      Error);  // q inside x
  EXPECT_NO_THROW(ops->gdn_conv(qkv, conv_w, window, q, k, v, 2, 1e-6, 0));
  ops->synchronize();
}

}  // namespace
}  // namespace flide::test
