#include "server/routes/question_tree.h"

#include "core/error.h"
#include "engine/executor.h"
#include "server/routes/budgets.h"

namespace flide::server {

PreparedRequest prepare_tree(const RouteContext& ctx, Route route, const std::string& state_text,
                             const std::vector<DecisionQuestion>& questions,
                             const std::vector<std::string>& paths) {
  PreparedRequest out;
  // The routes validate option counts first, so what remains here is a letter that is not one
  // token after the prompt, i.e. a tokenizer unfit for the OpenJev labels; it still names the
  // question, and must stay a refusal rather than reach the engine.
  try {
    out.tree = build_decision_tree(ctx.tokenizer, state_text, questions, &ctx.calibration);
  } catch (const Error& e) {
    throw invalid_field(route, "questions", e.what());
  }
  // Token ids past the model's vocabulary would be a tokenizer/model mismatch (a server fault,
  // not a refusal): validate_tree's Error escapes, and the executor never sees the tree.
  validate_tree(out.tree, ctx.vocab_size);

  const std::vector<int64_t> paths_tokens = path_lengths(out.tree);
  const std::vector<int64_t> prompt_tokens(paths_tokens.begin() + 1, paths_tokens.end());
  check_prompt_tokens(prompt_tokens, paths, ctx.limits, route);

  out.input_tokens = stream_tokens(out.tree, ExecMode::ExecMode_fork);  // shared prefix once
  out.trunk_tokens = int64_t(out.tree.nodes[0].tokens.size());
  for (int64_t n : prompt_tokens) out.rendered_tokens += n;
  out.n_questions = int64_t(questions.size());
  return out;
}

}  // namespace flide::server
