// Terminal progress bar (see progress.h).
#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace flide::cli {

Progress::Progress(size_t total)
    : total_(total),
      enabled_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {
  draw();
}

void Progress::advance() {
  ++done_;
  draw();
}

void Progress::message(const std::string& line) {
  hide();
  std::fprintf(stderr, "%s\n", line.c_str());
  draw();
}

void Progress::finish() {
  hide();
  enabled_ = false;
}

void Progress::draw() {
  if (!enabled_ || total_ == 0) return;
  constexpr int kWidth = 30;
  const int filled = int(kWidth * done_ / total_);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, ' ');
  std::fprintf(stderr, "\r[%s] %zu/%zu requests, %.1f s", bar.c_str(), done_, total_, seconds);
  std::fflush(stderr);
}

void Progress::hide() {
  if (enabled_) std::fprintf(stderr, "\r\033[K");
}

}  // namespace flide::cli
