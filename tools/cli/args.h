// A tiny command-line flag parser for the flide subcommands: `--flag value`, `--flag=value` and
// boolean flags. Every mistake (unknown flag, missing value, a value on a boolean flag, a flag
// given twice, a stray positional argument) is a flide::Error naming the flag, so a typo never
// silently falls back to a default.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flide::cli {

struct FlagSpec {
  std::string_view name;  // without the leading "--"
  bool takes_value;
};

class Args {
 public:
  static Args parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& flags);

  bool has(std::string_view name) const;
  std::optional<std::string> value(std::string_view name) const;
  std::string required(std::string_view name) const;  // Error "--name is required"

 private:
  std::map<std::string, std::string, std::less<>> values_;  // boolean flags hold ""
};

}  // namespace flide::cli
