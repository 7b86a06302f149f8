// Pieces every flide subcommand shares: exit codes, the --dtype/--mode/--threads values, loading
// a model onto the CPU backend, and reading whole files. Parsing here is strict: a bad value is a
// flide::Error naming the flag, which main turns into `flide: error: ...` and exit code 2.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backend/ops.h"
#include "core/dtype.h"
#include "engine/executor.h"
#include "model/model.h"

namespace flide::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailedRequests = 1;  // the command ran, but some requests were rejected
constexpr int kExitUsage = 2;           // the command could not run (flags, model, files)

DType parse_dtype(const std::optional<std::string>& value);    // "f32" (default) or "f64"
ExecMode parse_mode(const std::optional<std::string>& value);  // "fork" (default) or "independent"
int parse_threads(const std::optional<std::string>& value);    // >= 1; default: all cores
std::string_view mode_name(ExecMode mode);

// The backend owns the weights the model points into, so it is declared first (destroyed last).
struct LoadedModel {
  std::unique_ptr<Ops> ops;
  std::unique_ptr<Model> model;
};
LoadedModel load_cpu_model(const std::filesystem::path& dir, DType dtype, int threads);

std::string read_file(const std::filesystem::path& path);  // Error naming the file
std::string read_stdin();

}  // namespace flide::cli
