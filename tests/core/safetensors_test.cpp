// SafetensorsStore: dtype conversion, sharded checkpoints, and every malformed-file case a
// download can produce (truncation, corrupt headers, bad offsets, inconsistent index). The
// files are written by the test itself, so the fixtures are exact down to the byte.
#include "core/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace flide {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

struct RawTensor {
  std::string name;
  std::string dtype;  // as spelled in the header: "BF16", "F16", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

template <typename T>
std::vector<uint8_t> to_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// bf16 is the top half of the float; the test values are chosen to be exact in bf16.
std::vector<uint8_t> bf16_bytes(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) {
    uint32_t wide;
    std::memcpy(&wide, &v, 4);
    bits.push_back(uint16_t(wide >> 16));
  }
  return to_bytes(bits);
}

void write_file(const fs::path& path, uint64_t header_len, const std::string& header,
                const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

// Packs the tensors back to back (no alignment padding, so data land at odd offsets).
void write_safetensors(const fs::path& path, const std::vector<RawTensor>& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<uint8_t> data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  const std::string text = header.dump();
  write_file(path, text.size(), text, data);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

uint64_t header_len_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  return n;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("flide_safetensors_" + std::to_string(::getpid()) + "_" + test->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `fn`, which must throw flide::Error, and returns the message.
  template <typename Fn>
  std::string error_of(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected flide::Error";
    return "";
  }

  std::vector<RawTensor> f32_pair() {
    return {{"a.weight", "F32", {2, 2}, to_bytes(std::vector<float>{1, 2, 3, 4})},
            {"b.weight", "F32", {3}, to_bytes(std::vector<float>{5, 6, 7})}};
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, SingleFileConvertsEveryDtype) {
  const std::vector<float> bf16_values = {1.0f, -2.5f, 3.140625f, -0.0078125f, 65280.0f, 0.0f};
  // f16: 1, -2, smallest subnormal 2^-24, largest subnormal 1023 * 2^-24, -2^-24, 65504, -inf
  const std::vector<uint16_t> f16_bits = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x8001, 0x7BFF, 0xFC00};
  const std::vector<float> f16_values = {1.0f,
                                         -2.0f,
                                         std::ldexp(1.0f, -24),
                                         1023.0f * std::ldexp(1.0f, -24),
                                         -std::ldexp(1.0f, -24),
                                         65504.0f,
                                         -std::numeric_limits<float>::infinity()};
  const std::vector<float> f32_values = {0.1f, -1e-30f, 3.4e38f};
  const std::vector<double> f64_values = {0.5, -1.25, 1e-3};
  write_safetensors(
      dir_ / "model.safetensors",
      {{"x.bf16", "BF16", {2, 3}, bf16_bytes(bf16_values)},
       {"x.f16", "F16", {7}, to_bytes(f16_bits)},  // 7 elements: F32 below is unaligned
       {"x.f32", "F32", {3, 1}, to_bytes(f32_values)},
       {"x.f64", "F64", {3}, to_bytes(f64_values)},
       {"x.scalar", "F32", {}, to_bytes(std::vector<float>{42.0f})},
       {"x.empty", "BF16", {0, 4}, {}}});

  SafetensorsStore store = SafetensorsStore::open(dir_);
  EXPECT_EQ(store.names(),
            (std::vector<std::string>{"x.bf16", "x.empty", "x.f16", "x.f32", "x.f64", "x.scalar"}));
  EXPECT_TRUE(store.has("x.f16"));
  EXPECT_FALSE(store.has("__metadata__"));
  EXPECT_FALSE(store.has("missing"));

  const TensorInfo& bf = store.info("x.bf16");
  EXPECT_EQ(bf.name, "x.bf16");
  EXPECT_EQ(bf.file, "model.safetensors");
  EXPECT_EQ(bf.dtype, DType::DType_bf16);
  EXPECT_EQ(bf.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(bf.nbytes, 12u);
  EXPECT_EQ(store.info("x.f64").dtype, DType::DType_f64);

  EXPECT_EQ(store.read_f32("x.bf16", {2, 3}), bf16_values);
  EXPECT_EQ(store.read_f32("x.f16", {7}), f16_values);
  EXPECT_EQ(store.read_f32("x.f32", {3, 1}), f32_values);
  EXPECT_EQ(store.read_f32("x.f64", {3}), (std::vector<float>{0.5f, -1.25f, float(1e-3)}));
  EXPECT_EQ(store.read_f32("x.scalar", {}), std::vector<float>{42.0f});
  EXPECT_TRUE(store.read_f32("x.empty", {0, 4}).empty());

  // Moving keeps the mapping (and so info().data) valid.
  SafetensorsStore moved = std::move(store);
  EXPECT_EQ(moved.read_f32("x.bf16", {2, 3}), bf16_values);
}

TEST_F(SafetensorsTest, OpenFileAndUnknownTensor) {
  const fs::path file = dir_ / "weights.safetensors";
  write_safetensors(file, f32_pair());
  SafetensorsStore store = SafetensorsStore::open_file(file);
  EXPECT_EQ(store.info("b.weight").file, "weights.safetensors");
  EXPECT_EQ(store.read_f32("b.weight", {3}), (std::vector<float>{5, 6, 7}));
  std::string msg = error_of([&] { store.info("nope"); });
  EXPECT_THAT(msg, HasSubstr("tensor nope not found in"));
  EXPECT_THAT(msg, HasSubstr("weights.safetensors"));
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  write_safetensors(dir_ / "model-00001-of-00002.safetensors",
                    {{"embed", "BF16", {2, 2}, bf16_bytes({1, 2, 3, 4})},
                     {"layer0", "F32", {2}, to_bytes(std::vector<float>{-1, -2})}});
  write_safetensors(dir_ / "model-00002-of-00002.safetensors",
                    {{"layer1", "F16", {1}, to_bytes(std::vector<uint16_t>{0x3800})},
                     {"norm", "F32", {2}, to_bytes(std::vector<float>{0.25f, 0.75f})}});
  write_text(dir_ / "model.safetensors.index.json",
             json{{"metadata", {{"total_size", 30}}},
                  {"weight_map",
                   {{"embed", "model-00001-of-00002.safetensors"},
                    {"layer0", "model-00001-of-00002.safetensors"},
                    {"layer1", "model-00002-of-00002.safetensors"},
                    {"norm", "model-00002-of-00002.safetensors"}}}}
                 .dump());
  // A stray single-file checkpoint next to the index must be ignored: the index wins.
  write_safetensors(dir_ / "model.safetensors", f32_pair());

  SafetensorsStore store = SafetensorsStore::open(dir_);
  EXPECT_EQ(store.names(), (std::vector<std::string>{"embed", "layer0", "layer1", "norm"}));
  EXPECT_EQ(store.info("embed").file, "model-00001-of-00002.safetensors");
  EXPECT_EQ(store.info("norm").file, "model-00002-of-00002.safetensors");
  EXPECT_EQ(store.read_f32("embed", {2, 2}), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(store.read_f32("layer0", {2}), (std::vector<float>{-1, -2}));
  EXPECT_EQ(store.read_f32("layer1", {1}), std::vector<float>{0.5f});
  EXPECT_EQ(store.read_f32("norm", {2}), (std::vector<float>{0.25f, 0.75f}));
  EXPECT_THAT(error_of([&] { store.info("a.weight"); }), HasSubstr(dir_.string()));
}

TEST_F(SafetensorsTest, MissingDirectory) {
  const fs::path missing = dir_ / "does_not_exist";
  std::string msg = error_of([&] { SafetensorsStore::open(missing); });
  EXPECT_THAT(msg, HasSubstr("no model.safetensors or model.safetensors.index.json in"));
  EXPECT_THAT(msg, HasSubstr("does_not_exist"));
  // An existing directory without a checkpoint fails the same way.
  EXPECT_THAT(error_of([&] { SafetensorsStore::open(dir_); }),
              HasSubstr("no model.safetensors or model.safetensors.index.json in"));
  EXPECT_THAT(error_of([&] { SafetensorsStore::open_file(missing / "x.safetensors"); }),
              HasSubstr("x.safetensors"));
}

TEST_F(SafetensorsTest, TruncatedDataRegion) {
  const fs::path file = dir_ / "model.safetensors";
  write_safetensors(file, f32_pair());
  fs::resize_file(file, fs::file_size(file) - 4);  // cuts the last element of b.weight
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("b.weight"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST_F(SafetensorsTest, TruncatedHeader) {
  const fs::path file = dir_ / "model.safetensors";
  write_safetensors(file, f32_pair());
  fs::resize_file(file, 8 + header_len_of(file) / 2);
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("truncated"));

  fs::resize_file(file, 5);  // not even the length prefix
  msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("too short"));

  fs::resize_file(file, 0);
  EXPECT_THAT(error_of([&] { SafetensorsStore::open(dir_); }), HasSubstr("model.safetensors"));
}

TEST_F(SafetensorsTest, CorruptHeaderJson) {
  const std::string header =
      R"({"a.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})";
  write_file(dir_ / "model.safetensors", header.size(), header.substr(0, header.size() - 1) + "x",
             std::vector<uint8_t>(4));
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("not valid JSON"));

  const std::string array = "[1, 2]";
  write_file(dir_ / "model.safetensors", array.size(), array, {});
  EXPECT_THAT(error_of([&] { SafetensorsStore::open(dir_); }), HasSubstr("not a JSON object"));
}

TEST_F(SafetensorsTest, HeaderLengthLargerThanFile) {
  const std::string header =
      R"({"a.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  write_file(dir_ / "model.safetensors", header.size() + 1000, header, std::vector<uint8_t>(4));
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("runs past the end of the file"));

  write_file(dir_ / "model.safetensors", uint64_t(1) << 40, header, std::vector<uint8_t>(4));
  EXPECT_THAT(error_of([&] { SafetensorsStore::open(dir_); }), HasSubstr("exceeds 100 MB"));
}

TEST_F(SafetensorsTest, DataOffsetsOutOfRange) {
  const std::string header =
      R"({"a.weight": {"dtype": "F32", "shape": [2], "data_offsets": [100, 108]}})";
  write_file(dir_ / "model.safetensors", header.size(), header, std::vector<uint8_t>(8));
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("tensor a.weight in"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("[100, 108]"));

  const std::string reversed =
      R"({"a.weight": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})";
  write_file(dir_ / "model.safetensors", reversed.size(), reversed, std::vector<uint8_t>(8));
  EXPECT_THAT(error_of([&] { SafetensorsStore::open(dir_); }), HasSubstr("a.weight"));
}

TEST_F(SafetensorsTest, ShapeTimesDtypeMismatch) {
  // Three f32 need 12 bytes; the span has 8.
  const std::string header =
      R"({"a.weight": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})";
  write_file(dir_ / "model.safetensors", header.size(), header, std::vector<uint8_t>(8));
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("tensor a.weight in"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
  EXPECT_THAT(msg, HasSubstr("needs 12 bytes"));
}

TEST_F(SafetensorsTest, MalformedEntries) {
  struct Case {
    const char* header;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"t": {"shape": [1], "data_offsets": [0, 4]}})", "\"dtype\""},
      {R"({"t": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", "dtype I64"},
      {R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "shape"},
      {R"({"t": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})", "\"shape\""},
      {R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", "\"data_offsets\""},
      {R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}})", "\"data_offsets\""},
      {R"({"t": 7})", "not a JSON object"},
      {R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})",
       "overflows"},
  };
  for (const Case& c : cases) {
    const std::string header = c.header;
    write_file(dir_ / "model.safetensors", header.size(), header, std::vector<uint8_t>(8));
    std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
    EXPECT_THAT(msg, HasSubstr("tensor t in")) << c.header;
    EXPECT_THAT(msg, HasSubstr("model.safetensors")) << c.header;
    EXPECT_THAT(msg, HasSubstr(c.expect)) << c.header;
  }
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  const std::string header = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                 "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})";
  write_file(dir_ / "model.safetensors", header.size(), header, std::vector<uint8_t>(8));
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("tensors a and b overlap in"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));
}

TEST_F(SafetensorsTest, IndexNamesMissingShard) {
  write_safetensors(dir_ / "model-00001-of-00002.safetensors", f32_pair());
  write_text(dir_ / "model.safetensors.index.json",
             json{{"weight_map",
                   {{"a.weight", "model-00001-of-00002.safetensors"},
                    {"b.weight", "model-00001-of-00002.safetensors"},
                    {"c.weight", "model-00002-of-00002.safetensors"}}}}
                 .dump());
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("c.weight"));
  EXPECT_THAT(msg, HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(msg, HasSubstr("does not exist"));
}

TEST_F(SafetensorsTest, IndexNamesTensorNotInShard) {
  write_safetensors(dir_ / "model-00001-of-00002.safetensors", f32_pair());
  write_safetensors(dir_ / "model-00002-of-00002.safetensors",
                    {{"c.weight", "F32", {1}, to_bytes(std::vector<float>{1})}});
  // b.weight is really in shard 1, but the index claims shard 2.
  write_text(dir_ / "model.safetensors.index.json",
             json{{"weight_map",
                   {{"a.weight", "model-00001-of-00002.safetensors"},
                    {"b.weight", "model-00002-of-00002.safetensors"},
                    {"c.weight", "model-00002-of-00002.safetensors"}}}}
                 .dump());
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("b.weight"));
  EXPECT_THAT(msg, HasSubstr("model-00002-of-00002.safetensors"));

  // A name no shard holds at all.
  write_text(dir_ / "model.safetensors.index.json",
             json{{"weight_map",
                   {{"a.weight", "model-00001-of-00002.safetensors"},
                    {"ghost", "model-00002-of-00002.safetensors"}}}}
                 .dump());
  msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("ghost"));
  EXPECT_THAT(msg, HasSubstr("model-00002-of-00002.safetensors"));
}

TEST_F(SafetensorsTest, TensorInTwoShards) {
  write_safetensors(dir_ / "s1.safetensors", f32_pair());
  write_safetensors(dir_ / "s2.safetensors",
                    {{"a.weight", "F32", {1}, to_bytes(std::vector<float>{1})}});
  write_text(
      dir_ / "model.safetensors.index.json",
      json{{"weight_map", {{"a.weight", "s1.safetensors"}, {"x", "s2.safetensors"}}}}.dump());
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("tensor a.weight appears in both"));
}

TEST_F(SafetensorsTest, MalformedIndex) {
  write_text(dir_ / "model.safetensors.index.json", "{\"weight_map\": {");
  std::string msg = error_of([&] { SafetensorsStore::open(dir_); });
  EXPECT_THAT(msg, HasSubstr("model.safetensors.index.json"));
  EXPECT_THAT(msg, HasSubstr("malformed JSON"));

  write_text(dir_ / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_THAT(error_of([&] { SafetensorsStore::open(dir_); }), HasSubstr("\"weight_map\""));

  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  EXPECT_THAT(error_of([&] { SafetensorsStore::open(dir_); }), HasSubstr("tensor a"));
}

TEST_F(SafetensorsTest, ReadShapeMismatch) {
  write_safetensors(dir_ / "model.safetensors", f32_pair());
  SafetensorsStore store = SafetensorsStore::open(dir_);
  EXPECT_EQ(error_of([&] { store.read_f32("a.weight", {4}); }),
            "tensor a.weight in model.safetensors has shape [2, 2], expected [4]");
  EXPECT_EQ(error_of([&] {
              store.read_f32("b.weight", {1, 3});
            }),
            "tensor b.weight in model.safetensors has shape [3], expected [1, 3]");
}

}  // namespace
}  // namespace flide
