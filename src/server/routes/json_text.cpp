#include "server/routes/json_text.h"

#include <charconv>
#include <cstdlib>

namespace flide::server {

namespace {

using json = nlohmann::ordered_json;

// Python's float repr: the shortest round-trip digits, in positional notation when the decimal
// exponent is in [-4, 16) ("1000000000000000.0", "0.0001", "2.0") and scientific otherwise
// ("1e+16", "1e-05"). nlohmann switches one decade earlier (1e15 -> "1e+15"), so it cannot be
// used as is. Parsed JSON numbers are always finite.
std::string python_float(double value) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string_view sci(buf, size_t(res.ptr - buf));  // "-d.ddde+XX"
  const size_t e = sci.find('e');
  std::string out;
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c == '-')
      out += '-';
    else if (c != '.')
      digits += c;
  }
  const int exponent = std::atoi(std::string(sci.substr(e + 1)).c_str());
  const int point = exponent + 1;  // digits before the decimal point
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) out.append(".").append(digits, 1);
    const int magnitude = std::abs(exponent);
    out += exponent < 0 ? "e-" : "e+";
    if (magnitude < 10) out += '0';
    out += std::to_string(magnitude);
  } else if (point <= 0) {
    out.append("0.").append(size_t(-point), '0').append(digits);
  } else if (size_t(point) >= digits.size()) {
    out.append(digits).append(size_t(point) - digits.size(), '0').append(".0");
  } else {
    out.append(digits, 0, size_t(point)).append(".").append(digits, size_t(point));
  }
  return out;
}

void append(std::string& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        out += json(key).dump(-1, ' ', false);
        out += ": ";
        append(out, item);
      }
      out += '}';
      break;
    }
    case json::value_t::array: {
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += ", ";
        append(out, value[i]);
      }
      out += ']';
      break;
    }
    case json::value_t::number_float:
      out += python_float(value.get<double>());
      break;
    default:  // strings escape as Python does with ensure_ascii=False; ints, bools, null agree
      out += value.dump(-1, ' ', false);
      break;
  }
}

}  // namespace

std::string json_text(const json& value) {
  std::string out;
  append(out, value);
  return out;
}

}  // namespace flide::server
