// Pieces every flide subcommand shares: exit codes, the --device/--dtype/--mode/--threads values,
// making the backend and loading a model onto it, and reading whole files. Parsing here is strict:
// a bad value is a flide::Error naming the flag, which main turns into `flide: error: ...` and exit
// code 2.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/ops.h"
#include "core/dtype.h"
#include "engine/decision_calibration.h"
#include "engine/executor.h"
#include "model/model.h"

namespace flide::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailedRequests = 1;  // the command ran, but some requests were rejected
constexpr int kExitUsage = 2;           // the command could not run (flags, model, files)

enum class Device : uint8_t { Device_cpu, Device_cuda };

// Where and in what precision a command computes: --device cpu (default) with --dtype f32
// (default) or f64 on --threads N cores, or --device cuda (device 0) in bf16, the only dtype
// of the CUDA backend (--dtype bf16 or absent). --batch-invariant: a request's results do not
// depend on what else shares its round (make_cpu_ops, make_cuda_ops). --quantization fp8 (CUDA
// only): the fused products on FP8 operands (make_cuda_ops' Quantization).
struct BackendChoice {
  Device device = Device::Device_cpu;
  DType dtype = DType::DType_f32;
  int threads = 1;  // CPU only
  bool batch_invariant = false;
  Quantization quantization = Quantization::Quantization_none;
};
BackendChoice parse_backend(const std::optional<std::string>& device,
                            const std::optional<std::string>& dtype,
                            const std::optional<std::string>& threads, bool batch_invariant = false,
                            const std::optional<std::string>& quantization = std::nullopt);
std::string_view device_name(Device device);
// "cpu f32 (16 threads)", "cuda bf16"
std::string backend_description(const BackendChoice& backend);

ExecMode parse_mode(const std::optional<std::string>& value);  // "fork" (default) or "independent"
int parse_threads(const std::optional<std::string>& value);    // >= 1; default: all cores
std::string_view mode_name(ExecMode mode);

// The backend; "--device cuda: ..." errors when CUDA is not built in or no device is found.
std::unique_ptr<Ops> make_backend(const BackendChoice& backend);

// The backend owns the weights the model points into, so it is declared first (destroyed last).
struct LoadedModel {
  std::unique_ptr<Ops> ops;
  std::unique_ptr<Model> model;
};
LoadedModel load_model_on(const std::filesystem::path& dir, const BackendChoice& backend);
// Random weights of a config.json's shapes (model.h load_model_random).
LoadedModel load_random_model_on(const std::filesystem::path& config_file,
                                 const BackendChoice& backend, uint64_t seed);

class Args;
// Where the weights come from: --model DIR (a checkpoint) or --config CONFIG.json (random
// weights of its shapes, seeded by --seed); exactly one, checked before anything is loaded.
struct ModelSource {
  std::filesystem::path path;  // the model directory, or the config file when random
  bool random = false;
  uint64_t seed = 0;
};
ModelSource parse_model_source(const Args& args);
LoadedModel load_model_source(const ModelSource& source, const BackendChoice& backend);

// An on|off flag such as --graphs (CUDA graphs per capacity bucket); absent: on.
bool parse_on_off(const std::optional<std::string>& value, const char* flag);
// Turns graphs on or off in `ops` and returns the round policy that goes with it: rounds padded
// to their bucket only when the backend replays graphs.
RoundPolicy graphs_policy(Ops& ops, bool graphs);

// A comma-separated flag value's entries, in order; empty entries are kept (for the caller to
// refuse with its flag's name): "a,,b" -> {"a", "", "b"}, "" -> {""}.
std::vector<std::string> split_list(const std::string& text);

// A count flag (--reps, --port, --max-queue...): an integer in [minimum, maximum], `fallback`
// when absent; Error naming the flag otherwise.
int64_t parse_count(const std::optional<std::string>& value, const char* flag, int64_t fallback,
                    int64_t minimum, int64_t maximum = 1000000);

// A time flag in seconds (--duration, --warmup S): a decimal number in [minimum, maximum],
// `fallback` when absent; Error naming the flag otherwise.
double parse_seconds(const std::optional<std::string>& value, const char* flag, double fallback,
                     double minimum, double maximum);

// --seed: a non-negative integer, 0 when absent.
uint64_t parse_seed(const std::optional<std::string>& value);

std::string read_file(const std::filesystem::path& path);  // Error naming the file

// `path` opened for writing (truncated), or Error "--<flag>: cannot write "<path>"".
std::ofstream open_output(const std::string& path, const char* flag);

// A JSON file's top-level object; Error "<path> is not valid JSON" or "... is not a JSON object"
// (`source` names it, e.g. with its flag).
nlohmann::json read_json_object(const std::filesystem::path& path, const std::string& source);

// The decision calibration (engine/decision_calibration.h) in `config`, the checkpoint's parsed
// config.json (`config_file`), or, when the --calibration flag names a file, in that one instead
// (a JSON object with the same keys), for a checkpoint whose config.json lacks them; Error naming
// the file and key at fault.
DecisionCalibration load_calibration(const nlohmann::json& config,
                                     const std::filesystem::path& config_file,
                                     const std::optional<std::string>& flag);

// The lines of a JSONL text that hold something (blank ones skipped), with their 1-based
// numbers in the file, for errors that name the line.
struct NumberedLine {
  size_t number = 0;
  std::string text;
};
std::vector<NumberedLine> nonblank_lines(const std::string& text);
std::string read_stdin();

}  // namespace flide::cli
