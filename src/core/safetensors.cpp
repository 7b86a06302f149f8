// Safetensors reader. Each file is mapped read-only and its JSON header validated in full at
// open, so a bad checkpoint fails at load with a message naming the tensor and the file, never
// later in the forward with a crash. Tensor data stay in the mapping: the OS pages in only what
// read_f32 touches, and nothing is copied until a caller asks for floats.
//
// Format: u64 little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the
// data region; offsets are relative to the start of the data region.
//
// Only the float dtypes a model can load (BF16, F16, F32, F64) are accepted; any other dtype is
// rejected at open, because TensorInfo must carry a DType and a Qwen3.5 checkpoint has no
// integer tensors. Tensors a shard holds beyond those its index lists are kept (harmless).
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data are little-endian and are read in place");

namespace flide {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A header this large is not a real checkpoint (HF caps headers at 100 MB); refusing it keeps a
// corrupt length from making us parse the whole data region as JSON.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000 * 1000;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

bool parse_dtype(const std::string& s, DType& out) {
  if (s == "BF16")
    out = DType::DType_bf16;
  else if (s == "F16")
    out = DType::DType_f16;
  else if (s == "F32")
    out = DType::DType_f32;
  else if (s == "F64")
    out = DType::DType_f64;
  else
    return false;
  return true;
}

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(cat("cannot open ", path.string(), ": ", std::strerror(errno)));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(cat(path.string(), ": malformed JSON: ", e.what()));
  }
}

}  // namespace

// One read-only mapping of a whole file; unmapped on destruction.
struct SafetensorsStore::Mapping {
  fs::path path;
  const uint8_t* base = nullptr;
  size_t size = 0;

  explicit Mapping(fs::path p) : path(std::move(p)) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(cat("cannot open ", path.string(), ": ", std::strerror(errno)));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(cat(path.string(), " is not a regular file"));
    }
    size = size_t(st.st_size);
    if (size > 0) {  // mmap rejects length 0; an empty file fails header validation instead
      void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      int err = errno;
      ::close(fd);  // the mapping keeps the file alive
      if (addr == MAP_FAILED)
        throw Error(cat("cannot mmap ", path.string(), ": ", std::strerror(err)));
      base = static_cast<const uint8_t*>(addr);
    } else {
      ::close(fd);
    }
  }
  ~Mapping() {
    if (base) ::munmap(const_cast<uint8_t*>(base), size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

namespace {

// Validates one file's header and adds its tensors to `tensors`, pointing into the mapping.
void add_file_tensors(const uint8_t* base, size_t size, const fs::path& path,
                      std::unordered_map<std::string, TensorInfo>& tensors) {
  const std::string file = path.string();
  const std::string file_name = path.filename().string();
  if (size < 8)
    throw Error(cat(file, ": ", size, " bytes, too short for a safetensors file (truncated?)"));
  uint64_t header_len;
  std::memcpy(&header_len, base, 8);
  if (header_len > kMaxHeaderBytes)
    throw Error(cat(file, ": header length ", header_len,
                    " exceeds 100 MB; corrupt or not a safetensors file"));
  if (header_len > size - 8)
    throw Error(cat(file, ": header length ", header_len, " runs past the end of the file (", size,
                    " bytes); the file is truncated"));

  json header;
  try {
    header = json::parse(base + 8, base + 8 + header_len);
  } catch (const json::exception& e) {
    throw Error(cat(file, ": header is not valid JSON: ", e.what()));
  }
  if (!header.is_object()) throw Error(cat(file, ": header is not a JSON object"));

  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw Error(cat(file, ": \"__metadata__\" is not a JSON object"));
      continue;
    }
    auto bad = [&](const std::string& what) {
      return Error(cat("tensor ", name, " in ", file, ": ", what));
    };
    if (!entry.is_object()) throw bad("header entry is not a JSON object");

    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string())
      throw bad("\"dtype\" is missing or not a string");
    TensorInfo info;
    if (!parse_dtype(dtype_it->get<std::string>(), info.dtype))
      throw bad(cat("dtype ", dtype_it->get<std::string>(),
                    " is not supported (BF16, F16, F32 or F64 only)"));

    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array())
      throw bad("\"shape\" is missing or not an array");
    uint64_t count = 1;
    for (const json& dim : *shape_it) {
      if (!dim.is_number_unsigned() ||
          dim.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        throw bad(
            cat("shape ", shape_it->dump(), " has an entry that is not a non-negative integer"));
      uint64_t d = dim.get<uint64_t>();
      if (__builtin_mul_overflow(count, d, &count))
        throw bad(cat("shape ", shape_it->dump(), " overflows"));
      info.shape.push_back(int64_t(d));
    }

    auto offsets_it = entry.find("data_offsets");
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
      throw bad("\"data_offsets\" is missing or not [begin, end] non-negative integers");
    const uint64_t begin = (*offsets_it)[0].get<uint64_t>();
    const uint64_t end = (*offsets_it)[1].get<uint64_t>();
    if (end < begin) throw bad(cat("data_offsets [", begin, ", ", end, "] end before they begin"));
    uint64_t nbytes;
    if (__builtin_mul_overflow(count, uint64_t(dtype_size(info.dtype)), &nbytes))
      throw bad(cat("shape ", shape_str(info.shape), " overflows"));
    if (nbytes != end - begin)
      throw bad(cat("shape ", shape_str(info.shape), " x ", dtype_name(info.dtype), " needs ",
                    nbytes, " bytes but data_offsets [", begin, ", ", end, "] span ", end - begin));
    if (end > data_size)
      throw bad(cat("data_offsets [", begin, ", ", end, "] run past the data region (", data_size,
                    " bytes); the file is truncated or corrupt"));

    info.name = name;
    info.file = file_name;
    info.data = data + begin;
    info.nbytes = size_t(nbytes);
    auto [it, inserted] = tensors.emplace(name, std::move(info));
    if (!inserted)
      throw Error(cat("tensor ", name, " appears in both ", it->second.file, " and ", file));
    spans.push_back({begin, end, &it->first});
  }

  // Overlapping spans mean a corrupt header: two tensors would alias the same bytes.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end)
      throw Error(
          cat("tensors ", *spans[i - 1].name, " and ", *spans[i].name, " overlap in ", file));
}

}  // namespace

SafetensorsStore::SafetensorsStore() = default;
SafetensorsStore::SafetensorsStore(SafetensorsStore&&) noexcept = default;
SafetensorsStore& SafetensorsStore::operator=(SafetensorsStore&&) noexcept = default;
SafetensorsStore::~SafetensorsStore() = default;

SafetensorsStore SafetensorsStore::open_file(const fs::path& file) {
  SafetensorsStore store;
  store.where_ = file.string();
  auto& m = *store.mappings_.emplace_back(std::make_unique<Mapping>(file));
  add_file_tensors(m.base, m.size, m.path, store.tensors_);
  return store;
}

SafetensorsStore SafetensorsStore::open(const fs::path& dir) {
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    if (!fs::exists(single_path, ec))
      throw Error(cat("no model.safetensors or model.safetensors.index.json in ", dir.string()));
    SafetensorsStore store = open_file(single_path);
    store.where_ = dir.string();
    return store;
  }

  const json index = read_json_file(index_path);
  const std::string index_file = index_path.string();
  auto map_it = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || map_it == index.end() || !map_it->is_object() || map_it->empty())
    throw Error(cat(index_file, ": \"weight_map\" is missing, empty or not a JSON object"));

  // shard file name -> one tensor it should hold, for the message if the shard is missing
  std::map<std::string, std::string> shards;
  for (const auto& [name, shard] : map_it->items()) {
    if (!shard.is_string())
      throw Error(cat(index_file, ": weight_map entry for tensor ", name, " is not a file name"));
    shards.emplace(shard.get<std::string>(), name);
  }

  SafetensorsStore store;
  store.where_ = dir.string();
  for (const auto& [shard, some_tensor] : shards) {
    const fs::path shard_path = dir / shard;
    if (!fs::exists(shard_path, ec))
      throw Error(cat(index_file, " maps tensor ", some_tensor, " to shard ", shard,
                      ", which does not exist in ", dir.string()));
    auto& m = *store.mappings_.emplace_back(std::make_unique<Mapping>(shard_path));
    add_file_tensors(m.base, m.size, m.path, store.tensors_);
  }
  for (const auto& [name, shard] : map_it->items()) {
    const std::string shard_name = fs::path(shard.get<std::string>()).filename().string();
    auto it = store.tensors_.find(name);
    if (it == store.tensors_.end() || it->second.file != shard_name)
      throw Error(cat(index_file, " maps tensor ", name, " to shard ", shard.get<std::string>(),
                      ", but that shard has no tensor ", name));
  }
  return store;
}

bool SafetensorsStore::has(std::string_view name) const {
  return tensors_.count(std::string(name)) != 0;
}

const TensorInfo& SafetensorsStore::info(std::string_view name) const {
  auto it = tensors_.find(std::string(name));
  if (it == tensors_.end()) throw Error(cat("tensor ", name, " not found in ", where_));
  return it->second;
}

std::vector<std::string> SafetensorsStore::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, info] : tensors_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> SafetensorsStore::read_f32(std::string_view name,
                                              const std::vector<int64_t>& shape) const {
  const TensorInfo& t = info(name);
  if (t.shape != shape)
    throw Error(cat("tensor ", name, " in ", t.file, " has shape ", shape_str(t.shape),
                    ", expected ", shape_str(shape)));
  const size_t count = t.nbytes / dtype_size(t.dtype);
  std::vector<float> out(count);
  // memcpy per element: safetensors does not align data, and the compiler turns it into a load.
  switch (t.dtype) {
    case DType::DType_bf16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, t.data + 2 * i, 2);
        out[i] = bf16_to_f32(bits);
      }
      break;
    case DType::DType_f16:
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, t.data + 2 * i, 2);
        out[i] = f16_to_f32(bits);
      }
      break;
    case DType::DType_f32:
      if (count) std::memcpy(out.data(), t.data, count * 4);
      break;
    case DType::DType_f64:
      for (size_t i = 0; i < count; ++i) {
        double v;
        std::memcpy(&v, t.data + 8 * i, 8);
        out[i] = float(v);
      }
      break;
  }
  return out;
}

}  // namespace flide
