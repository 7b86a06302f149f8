// A committed checkpoint run at a CPU dtype: the parameter of the CPU suites that load every
// fixture checkpoint, with the test-name rule they share ("golden_gqa_f32").
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>

#include "backend/ops.h"

namespace flide::test {

struct CheckpointParam {
  const char* dir;  // relative to the source root
  DType dtype;      // DType_f32 or DType_f64
};

inline std::string checkpoint_param_name(const CheckpointParam& p) {
  std::string name = std::filesystem::path(p.dir).filename().string();
  std::replace(name.begin(), name.end(), '-', '_');
  return name + (p.dtype == DType::DType_f32 ? "_f32" : "_f64");
}

}  // namespace flide::test
