// Errors: user-facing failures (bad files, bad requests) are flide::Error with a message that
// names what is wrong; internal invariants use FLIDE_CHECK, which adds file:line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace flide {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// cat("tensor ", name, " has ", n, " rows") -> one string; keeps call sites free of streams.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace flide

#define FLIDE_CHECK(cond, ...)                                                                 \
  do {                                                                                         \
    if (!(cond))                                                                               \
      throw ::flide::Error(                                                                    \
          ::flide::cat(__FILE__, ":", __LINE__, ": check failed: " #cond " ", ##__VA_ARGS__)); \
  } while (0)
