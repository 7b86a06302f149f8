// Flag parsing for the CLI (see args.h).
#include "args.h"

#include "core/error.h"

namespace flide::cli {

Args Args::parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (word.size() < 3 || word.compare(0, 2, "--") != 0)
      throw Error(cat("unexpected argument \"", word, "\" (flags start with --)"));
    const size_t eq = word.find('=');
    const std::string name = word.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : flags)
      if (f.name == name) spec = &f;
    if (!spec) throw Error(cat("unknown flag --", name));
    if (args.values_.count(name)) throw Error(cat("--", name, " given twice"));

    std::string value;
    if (!spec->takes_value) {
      if (eq != std::string::npos) throw Error(cat("--", name, " takes no value"));
    } else if (eq != std::string::npos) {
      value = word.substr(eq + 1);
    } else {
      if (i + 1 == argv.size()) throw Error(cat("--", name, " needs a value"));
      value = argv[++i];
    }
    args.values_.emplace(name, std::move(value));
  }
  return args;
}

bool Args::has(std::string_view name) const {
  return values_.find(name) != values_.end();
}

std::optional<std::string> Args::value(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::required(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw Error(cat("--", name, " is required"));
  return it->second;
}

}  // namespace flide::cli
