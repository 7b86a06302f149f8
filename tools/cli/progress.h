// A one-line progress bar on stderr for long `flide decide` runs, drawn only when stderr is a
// terminal so that logs and pipes stay free of carriage returns. Messages printed through it
// (per-line errors) clear the bar first so the two never interleave on one line.
#pragma once

#include <chrono>
#include <string>

namespace flide::cli {

class Progress {
 public:
  explicit Progress(size_t total);
  void advance();                         // one more item done; redraws
  void message(const std::string& line);  // prints `line` + newline on stderr above the bar
  void hide();                            // clears the bar until the next advance()
  void finish();                          // removes the bar for good

 private:
  void draw();

  size_t total_;
  size_t done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace flide::cli
