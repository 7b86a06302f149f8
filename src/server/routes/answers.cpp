#include "server/routes/answers.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flide::server {

const std::vector<double>& question_probs(const TreeResult& result, size_t question,
                                          size_t n_options) {
  FLIDE_CHECK(question + 1 < result.nodes.size(), "no result for question ", question);
  const std::vector<double>& p = result.nodes[question + 1].probs;
  FLIDE_CHECK(p.size() == n_options, "question ", question, ": ", p.size(), " probabilities for ",
              n_options, " options");
  // JSON has no NaN: written out, it would be a null where clients expect a number.
  FLIDE_CHECK(std::all_of(p.begin(), p.end(), [](double x) { return std::isfinite(x); }),
              "question ", question,
              ": the model's probabilities are not finite (a NaN or infinite score)");
  return p;
}

size_t argmax(const std::vector<double>& p) {
  return size_t(std::max_element(p.begin(), p.end()) - p.begin());
}

double choice_confidence(const std::vector<double>& p) {
  const double n = double(p.size());
  if (p.size() < 2) return 1.0;
  return std::max(0.0, (n * p[argmax(p)] - 1.0) / (n - 1.0));
}

double score_confidence(const std::vector<double>& p) {
  const size_t n = p.size();
  if (n < 2) return 1.0;
  const double mode = double(argmax(p));
  const double middle = double(n - 1) / 2.0;
  double spread = 0.0;
  double uniform_spread = 0.0;
  for (size_t i = 0; i < n; ++i) {
    spread += p[i] * std::abs(double(i) - mode);
    uniform_spread += std::abs(double(i) - middle);
  }
  uniform_spread /= double(n);
  return std::max(0.0, 1.0 - spread / uniform_spread);
}

double expected_level(const std::vector<double>& p) {
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i) sum += double(i) * p[i];
  return sum;
}

}  // namespace flide::server
