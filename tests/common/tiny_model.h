// The checkpoint shipped in the repo (models/flide-tiny-random) as the CLI and server suites
// reach it, and the skip for a tree where it has not been generated.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

namespace flide::test {

inline std::filesystem::path tiny_model_dir() {
  return std::filesystem::path(FLIDE_SOURCE_DIR) / "models" / "flide-tiny-random";
}

inline bool tiny_model_present() {
  return std::filesystem::exists(tiny_model_dir() / "config.json");
}

}  // namespace flide::test

#define FLIDE_SKIP_WITHOUT_TINY_MODEL()                                                     \
  do {                                                                                      \
    if (!::flide::test::tiny_model_present())                                               \
      GTEST_SKIP() << ::flide::test::tiny_model_dir() << " not found (not generated yet?)"; \
  } while (0)
