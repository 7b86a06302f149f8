// The access log (see access_log.h).
#include "server/http/access_log.h"

#include <cstdio>

namespace flide::server {

namespace {

constexpr size_t kMaxLoggedBytes = 200;

std::string printable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == kMaxLoggedBytes) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += char(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return out;
}

}  // namespace

std::string access_log_line(const httplib::Request& req, int status, double seconds) {
  char tail[64];
  std::snprintf(tail, sizeof tail, "\" %d %.1f ms\n", status, seconds * 1e3);
  return "flide serve: " + req.remote_addr + ":" + std::to_string(req.remote_port) + " \"" +
         printable(req.method) + " " + printable(req.path) + tail;
}

void log_access(const httplib::Request& req, int status, double seconds) {
  const std::string line = access_log_line(req, status, seconds);
  std::fwrite(line.data(), 1, line.size(), stderr);  // stdio locks the stream per call
}

}  // namespace flide::server
