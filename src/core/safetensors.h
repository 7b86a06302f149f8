// Memory-mapped safetensors checkpoints: a single model.safetensors or shards listed by
// model.safetensors.index.json. Headers are validated at open (dtype, shape x dtype size ==
// byte span, spans inside the file, no overlap); every failure is a flide::Error naming the
// tensor and the file. Data are read lazily from the mapping.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace flide {

struct TensorInfo {
  std::string name;
  std::string file;  // file name (not path) of the shard holding it, for messages
  DType dtype;       // F32, F64, BF16 or F16 in the file
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t nbytes = 0;
};

class SafetensorsStore {
 public:
  // Opens <dir>/model.safetensors.index.json if present (all listed shards), else
  // <dir>/model.safetensors. Errors: missing files, unreadable/corrupt headers, truncated data.
  static SafetensorsStore open(const std::filesystem::path& dir);
  // Opens one file (tests, tools).
  static SafetensorsStore open_file(const std::filesystem::path& file);

  bool has(std::string_view name) const;
  const TensorInfo& info(std::string_view name) const;  // Error "tensor X not found in DIR"
  std::vector<std::string> names() const;               // sorted

  // The tensor converted to float (exact for bf16/f16/f32; f64 is narrowed). Error naming the
  // tensor and file when its shape differs from `shape`.
  std::vector<float> read_f32(std::string_view name, const std::vector<int64_t>& shape) const;

  SafetensorsStore(SafetensorsStore&&) noexcept;
  SafetensorsStore& operator=(SafetensorsStore&&) noexcept;
  ~SafetensorsStore();

 private:
  SafetensorsStore();
  struct Mapping;
  std::vector<std::unique_ptr<Mapping>> mappings_;
  std::unordered_map<std::string, TensorInfo> tensors_;
  std::string where_;  // directory or file, for messages
};

}  // namespace flide
