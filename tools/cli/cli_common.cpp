// Shared CLI helpers (see cli_common.h).
#include "cli_common.h"

#include <charconv>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>

#include "args.h"
#include "core/error.h"

namespace flide::cli {

namespace {

DType parse_dtype(const std::optional<std::string>& value, Device device) {
  if (device == Device::Device_cuda) {
    if (!value || *value == "bf16") return DType::DType_bf16;
    throw Error(cat("--dtype: unknown dtype \"", *value,
                    "\" for --device cuda (the CUDA backend runs bf16 only)"));
  }
  if (!value || *value == "f32") return DType::DType_f32;
  if (*value == "f64") return DType::DType_f64;
  if (*value == "bf16")
    throw Error(
        "--dtype: unknown dtype \"bf16\" for --device cpu (the CPU backend runs f32 or "
        "f64; bf16 needs --device cuda)");
  throw Error(cat("--dtype: unknown dtype \"", *value, "\" (the CPU backend runs f32 or f64)"));
}

}  // namespace

BackendChoice parse_backend(const std::optional<std::string>& device,
                            const std::optional<std::string>& dtype,
                            const std::optional<std::string>& threads, bool batch_invariant,
                            const std::optional<std::string>& quantization) {
  BackendChoice backend;
  if (!device || *device == "cpu")
    backend.device = Device::Device_cpu;
  else if (*device == "cuda")
    backend.device = Device::Device_cuda;
  else
    throw Error(cat("--device: unknown device \"", *device, "\" (cpu or cuda)"));
  backend.dtype = parse_dtype(dtype, backend.device);
  backend.threads = parse_threads(threads);
  backend.batch_invariant = batch_invariant;
  if (quantization) {
    if (*quantization != "fp8")
      throw Error(cat("--quantization: unknown method \"", *quantization, "\" (fp8)"));
    if (backend.device != Device::Device_cuda)
      throw Error(
          "--quantization fp8: the FP8 products run on the CUDA backend only (--device cuda)");
    backend.quantization = Quantization::Quantization_fp8;
  }
  return backend;
}

std::string_view device_name(Device device) {
  return device == Device::Device_cuda ? "cuda" : "cpu";
}

std::string backend_description(const BackendChoice& backend) {
  std::string out = cat(device_name(backend.device), " ", dtype_name(backend.dtype));
  if (backend.device == Device::Device_cpu) out += cat(" (", backend.threads, " threads)");
  if (backend.batch_invariant) out += ", batch-invariant";
  if (backend.quantization == Quantization::Quantization_fp8) out += ", fp8 products";
  return out;
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

std::unique_ptr<Ops> make_backend(const BackendChoice& backend) {
  if (backend.device == Device::Device_cpu)
    return make_cpu_ops(backend.dtype, backend.threads, backend.batch_invariant);
  try {
    return make_cuda_ops(0, backend.batch_invariant, backend.quantization);
  } catch (const Error& e) {
    throw Error(cat("--device cuda: ", e.what()));
  }
}

LoadedModel load_model_on(const std::filesystem::path& dir, const BackendChoice& backend) {
  LoadedModel loaded;
  loaded.ops = make_backend(backend);
  loaded.model = load_model(dir, *loaded.ops);
  return loaded;
}

LoadedModel load_random_model_on(const std::filesystem::path& config_file,
                                 const BackendChoice& backend, uint64_t seed) {
  LoadedModel loaded;
  loaded.ops = make_backend(backend);
  loaded.model = load_model_random(config_file, *loaded.ops, seed);
  return loaded;
}

ModelSource parse_model_source(const Args& args) {
  if (args.has("model") == args.has("config"))
    throw Error("give exactly one of --model DIR and --config CONFIG.json");
  const bool random = args.has("config");
  return {random ? args.required("config") : args.required("model"), random,
          parse_seed(args.value("seed"))};
}

LoadedModel load_model_source(const ModelSource& source, const BackendChoice& backend) {
  return source.random ? load_random_model_on(source.path, backend, source.seed)
                       : load_model_on(source.path, backend);
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

std::ofstream open_output(const std::string& path, const char* flag) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw Error(cat("--", flag, ": cannot write \"", path, "\""));
  return file;
}

nlohmann::json read_json_object(const std::filesystem::path& path, const std::string& source) {
  nlohmann::json value = nlohmann::json::parse(read_file(path), nullptr, false);
  if (value.is_discarded()) throw Error(cat(source, " is not valid JSON"));
  if (!value.is_object()) throw Error(cat(source, " is not a JSON object"));
  return value;
}

DecisionCalibration load_calibration(const nlohmann::json& config,
                                     const std::filesystem::path& config_file,
                                     const std::optional<std::string>& flag) {
  if (!flag) return DecisionCalibration::from_config(config, cat(config_file));
  const std::string source = cat("--calibration ", std::filesystem::path(*flag));
  return DecisionCalibration::from_config(read_json_object(*flag, source), source);
}

std::vector<NumberedLine> nonblank_lines(const std::string& text) {
  std::vector<NumberedLine> lines;
  size_t begin = 0;
  for (size_t number = 1; begin < text.size(); ++number) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.find_first_not_of(" \t\r") != std::string::npos)
      lines.push_back({number, std::move(line)});
  }
  return lines;
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

bool parse_on_off(const std::optional<std::string>& value, const char* flag) {
  if (value && *value != "on" && *value != "off")
    throw Error(cat("--", flag, ": \"", *value, "\" is neither on nor off"));
  return !value || *value == "on";
}

RoundPolicy graphs_policy(Ops& ops, bool graphs) {
  RoundPolicy policy;
  policy.pad_to_buckets = ops.set_graphs(graphs);
  return policy;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> entries;
  for (size_t begin = 0;;) {
    const size_t end = text.find(',', begin);
    entries.push_back(text.substr(begin, end == std::string::npos ? end : end - begin));
    if (end == std::string::npos) return entries;
    begin = end + 1;
  }
}

namespace {

// A flag's value read whole as a T in [minimum, maximum] (fallback when absent), or Error
// "--<flag>: "<value>" is not <what> (<minimum> to <maximum>)".
template <class T>
T parse_in_range(const std::optional<std::string>& value, const char* flag, T fallback, T minimum,
                 T maximum, const char* what) {
  if (!value) return fallback;
  T x{};
  const char* end = value->data() + value->size();
  const auto [ptr, ec] = std::from_chars(value->data(), end, x);
  if (ec != std::errc() || ptr != end || !(x >= minimum && x <= maximum))
    throw Error(
        cat("--", flag, ": \"", *value, "\" is not ", what, " (", minimum, " to ", maximum, ")"));
  return x;
}

}  // namespace

int64_t parse_count(const std::optional<std::string>& value, const char* flag, int64_t fallback,
                    int64_t minimum, int64_t maximum) {
  return parse_in_range(value, flag, fallback, minimum, maximum, "a count");
}

double parse_seconds(const std::optional<std::string>& value, const char* flag, double fallback,
                     double minimum, double maximum) {
  return parse_in_range(value, flag, fallback, minimum, maximum, "a number of seconds");
}

uint64_t parse_seed(const std::optional<std::string>& value) {
  if (!value) return 0;
  size_t used = 0;
  uint64_t n = 0;
  try {
    n = std::stoull(*value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value->size() || value->empty() || (*value)[0] == '-')
    throw Error(cat("--seed: \"", *value, "\" is not a non-negative integer"));
  return n;
}

}  // namespace flide::cli
