#include "server/routes/budgets.h"

#include <algorithm>

#include "core/error.h"

namespace flide::server {

namespace {

// A token of text is a few bytes even JSON-escaped; 32 bytes a token refuses only bodies far
// over the budget, before any tokenizing, and never one that would fit (llama.cpp's factor).
constexpr int64_t kBytesPerToken = 32;
constexpr int64_t kMinByteThreshold = 4096;

// The evidence field of each route, named in the advice.
const char* evidence(Route route) {
  return route == Route::Route_systemone ? "\"state\"" : "\"input\"";
}

std::string prompt_advice(Route route) {
  return cat("Give a shorter ", evidence(route),
             ", fewer questions, or raise the limit with --max-prompt-tokens");
}

}  // namespace

void check_body_size(size_t bytes, const RouteLimits& limits, Route route) {
  if (limits.max_prompt_tokens <= 0) return;
  const int64_t threshold = std::max(kMinByteThreshold, kBytesPerToken * limits.max_prompt_tokens);
  if (int64_t(bytes) > threshold)
    throw too_large(cat("The request is ", bytes, " bytes, over the ", threshold,
                        " byte threshold for the ", limits.max_prompt_tokens, " token budget. ",
                        prompt_advice(route)));
}

void check_question_count(size_t n_questions, const RouteLimits& limits) {
  if (limits.max_questions > 0 && int64_t(n_questions) > limits.max_questions)
    throw too_large(cat("The request has ", n_questions, " questions, the maximum is ",
                        limits.max_questions,
                        ". Give fewer \"questions\", or raise the limit with --max-questions"));
}

void check_prompt_tokens(const std::vector<int64_t>& prompt_tokens,
                         const std::vector<std::string>& paths, const RouteLimits& limits,
                         Route route) {
  FLIDE_CHECK(prompt_tokens.size() == paths.size());
  int64_t total = 0;
  for (size_t i = 0; i < prompt_tokens.size(); ++i) {
    if (limits.max_context_tokens > 0 && prompt_tokens[i] > limits.max_context_tokens)
      throw exceed_context(
          route, paths[i],
          cat("the request (", prompt_tokens[i], " tokens) exceeds the context size (",
              limits.max_context_tokens, " tokens). Give a shorter ", evidence(route),
              ", or raise the limit with --max-context-tokens"));
    total += prompt_tokens[i];
  }
  if (limits.max_prompt_tokens > 0 && total > limits.max_prompt_tokens)
    throw too_large(cat("The request renders ", total, " prompt tokens, the maximum is ",
                        limits.max_prompt_tokens, ". ", prompt_advice(route)));
}

}  // namespace flide::server
