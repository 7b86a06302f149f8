// Shared CLI helpers (see cli_common.h).
#include "cli_common.h"

#include <charconv>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace flide::cli {

DType parse_dtype(const std::optional<std::string>& value) {
  if (!value || *value == "f32") return DType::DType_f32;
  if (*value == "f64") return DType::DType_f64;
  throw Error(cat("--dtype: unknown dtype \"", *value, "\" (the CPU backend runs f32 or f64)"));
}

ExecMode parse_mode(const std::optional<std::string>& value) {
  if (!value || *value == "fork") return ExecMode::ExecMode_fork;
  if (*value == "independent") return ExecMode::ExecMode_independent;
  throw Error(cat("--mode: unknown mode \"", *value, "\" (fork or independent)"));
}

int parse_threads(const std::optional<std::string>& value) {
  if (!value) return int(std::max(1u, std::thread::hardware_concurrency()));
  int threads = 0;
  const char* end = value->data() + value->size();
  auto [ptr, ec] = std::from_chars(value->data(), end, threads);
  if (ec != std::errc() || ptr != end || threads < 1 || threads > 4096)
    throw Error(cat("--threads: \"", *value, "\" is not a thread count (1 to 4096)"));
  return threads;
}

std::string_view mode_name(ExecMode mode) {
  return mode == ExecMode::ExecMode_fork ? "fork" : "independent";
}

LoadedModel load_cpu_model(const std::filesystem::path& dir, DType dtype, int threads) {
  LoadedModel loaded;
  loaded.ops = make_cpu_ops(dtype, threads);
  loaded.model = load_model(dir, *loaded.ops);
  return loaded;
}

std::string read_file(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) throw Error(cat(path, " is a directory, not a file"));
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(cat("cannot read ", path));
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) throw Error(cat("error while reading ", path));
  return text.str();
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

}  // namespace flide::cli
