// The engine loop in process, on the tiny model: rounds are packed as promised and answer what
// Executor::run answers alone. Determinism without sleeps: the first request's respond() blocks
// until the test releases it, which holds the engine thread inside its round while the test
// queues the next requests. Each test runs with rounds one at a time and overlapped.
#include "server/http/engine_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>

#include "backend/ops.h"
#include "engine/decision_prompt.h"
#include "server_process.h"

namespace flide::test {
namespace {

using server::ApiError;
using server::EngineLoop;
using server::EngineOptions;
using server::Metrics;
using server::PreparedRequest;

EngineOptions options(ExecMode mode, int64_t max_queue, int64_t round_tokens) {
  EngineOptions o;
  o.mode = mode;
  o.max_queue = max_queue;
  o.round_tokens = round_tokens;
  return o;
}

// The CPU model, claiming to be asynchronous so that the engine loop overlaps its rounds as it
// does on CUDA (on the CPU a round is computed when it is submitted); counts the loop's waits
// for a round's tail, i.e. the rounds it submitted while another was in flight, and can hold the
// engine thread in the first of them.
class ClaimsAsynchronous final : public ForwardingModel {
 public:
  using ForwardingModel::ForwardingModel;
  void wait_tail() override {
    if (tails++ == 0 && on_first_tail) on_first_tail();
    inner_.wait_tail();
  }
  bool asynchronous() const override { return true; }

  std::atomic<int> tails{0};
  std::function<void()> on_first_tail;  // set before the loop starts
};

// Every test runs twice: rounds one at a time (a synchronous model) and overlapped.
class EngineLoopTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    FLIDE_SKIP_WITHOUT_TINY_MODEL();
    ops_ = make_cpu_ops(DType::DType_f64, 1);
    model_ = load_model(tiny_model_dir(), *ops_);
    if (GetParam()) {
      cpu_model_ = std::move(model_);
      auto claims = std::make_unique<ClaimsAsynchronous>(*cpu_model_);
      overlapped_ = claims.get();
      model_ = std::move(claims);
    }
    tokenizer_.emplace(Tokenizer::load(tiny_model_dir() / "tokenizer.json"));
  }

  // A two-question request on `state`; its answer is the probabilities of each question.
  PreparedRequest request(const std::string& state) const {
    std::vector<DecisionQuestion> questions(2);
    questions[0].instructions = "Which is it?";
    questions[0].options = {{"first", ""}, {"second", ""}, {"third", ""}};
    questions[1].type = QuestionType::QuestionType_noul;
    questions[1].instructions = "Is it true?";
    questions[1].options = {{"yes", "The statement is true."}, {"no", "The statement is false."}};
    PreparedRequest r;
    r.tree = build_decision_tree(*tokenizer_, state, questions);
    const std::vector<int64_t> lengths = path_lengths(r.tree);
    r.trunk_tokens = int64_t(r.tree.nodes[0].tokens.size());
    r.input_tokens = r.trunk_tokens;
    for (size_t n = 1; n < r.tree.nodes.size(); ++n) {
      r.input_tokens += int64_t(r.tree.nodes[n].tokens.size());
      r.rendered_tokens += lengths[n];
    }
    r.n_questions = 2;
    r.respond = [](const TreeResult& result) {
      nlohmann::ordered_json probs = nlohmann::ordered_json::array();
      for (size_t n = 1; n < result.nodes.size(); ++n) probs.push_back(result.nodes[n].probs);
      return probs;
    };
    return r;
  }

  // `r`, whose respond() waits for `release` after saying it started.
  static PreparedRequest gated(PreparedRequest r, std::promise<void>& started,
                               std::shared_future<void> release) {
    r.respond = [inner = r.respond, &started, release](const TreeResult& result) {
      started.set_value();
      release.wait();
      return inner(result);
    };
    return r;
  }

  nlohmann::ordered_json alone(const PreparedRequest& r, ExecMode mode) {
    Executor executor(*model_);
    return r.respond(executor.run({r.tree}, mode)[0]);
  }

  static int status_of(std::future<nlohmann::ordered_json>& answer) {
    try {
      answer.get();
      return 200;
    } catch (const ApiError& e) {
      return e.status;
    }
  }

  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Model> cpu_model_;  // what model_ wraps, when the loop overlaps rounds
  std::unique_ptr<Model> model_;
  ClaimsAsynchronous* overlapped_ = nullptr;  // model_, when the loop overlaps rounds
  std::optional<Tokenizer> tokenizer_;
  Metrics metrics_;
};

TEST_P(EngineLoopTest, QueuedRequestsShareARoundAndAnswerAsAlone) {
  const std::vector<std::string> states = {"A short state.", "Another state, a little longer.",
                                           "Third."};
  std::vector<nlohmann::ordered_json> expected;
  for (const std::string& state : states)
    expected.push_back(alone(request(state), ExecMode::ExecMode_fork));

  EngineLoop loop(*model_, options(ExecMode::ExecMode_fork, 8, 100000), metrics_);
  std::promise<void> started, release;
  auto first =
      loop.submit(gated(request("Holding the engine."), started, release.get_future()), nullptr);
  started.get_future().wait();  // the engine thread is inside round 1
  std::vector<std::future<nlohmann::ordered_json>> answers;
  for (const std::string& state : states) answers.push_back(loop.submit(request(state), nullptr));
  release.set_value();
  EXPECT_EQ(status_of(first), 200);
  for (size_t i = 0; i < answers.size(); ++i) {
    const nlohmann::ordered_json got = answers[i].get();
    for (size_t q = 0; q < got.size(); ++q)
      for (size_t o = 0; o < got[q].size(); ++o)
        EXPECT_NEAR(got[q][o].get<double>(), expected[i][q][o].get<double>(), 1e-12);
  }
  loop.stop();
  const std::string text = metrics_.render();
  EXPECT_EQ(metric(text, "flide_round_requests_count"), 2);  // the gate, then the three together
  EXPECT_EQ(metric(text, "flide_round_requests_sum"), 4);
  EXPECT_EQ(metric(text, "flide_questions_total"), 8);
}

TEST_P(EngineLoopTest, RoundsStopAtTheTokenCapacityButTakeOneRequestAtLeast) {
  // Capacity 1 token: every request is larger, so each runs alone.
  EngineLoop loop(*model_, options(ExecMode::ExecMode_fork, 8, 1), metrics_);
  std::promise<void> started, release;
  auto first = loop.submit(gated(request("Gate."), started, release.get_future()), nullptr);
  started.get_future().wait();
  auto second = loop.submit(request("Second."), nullptr);
  auto third = loop.submit(request("Third."), nullptr);
  release.set_value();
  EXPECT_EQ(status_of(first), 200);
  EXPECT_EQ(status_of(second), 200);
  EXPECT_EQ(status_of(third), 200);
  loop.stop();
  EXPECT_EQ(metric(metrics_.render(), "flide_round_requests_count"), 3);
  // Overlapped, the third was submitted at the second's tail, before the second's answer.
  if (overlapped_) {
    EXPECT_GE(overlapped_->tails.load(), 1);
  }
}

TEST_P(EngineLoopTest, AFullQueueRefusesAndAGoneClientIsDropped) {
  EngineLoop loop(*model_, options(ExecMode::ExecMode_fork, 2, 100000), metrics_);
  std::promise<void> started, release;
  auto first = loop.submit(gated(request("Gate."), started, release.get_future()), nullptr);
  started.get_future().wait();
  auto kept = loop.submit(request("Kept."), [] { return false; });
  auto dropped = loop.submit(request("Dropped."), [] { return true; });
  try {
    loop.submit(request("One too many."), nullptr);
    ADD_FAILURE() << "a third waiting request was admitted with max_queue 2";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 429);
    EXPECT_EQ(e.type, "rate_limit_error");
    EXPECT_GE(e.retry_after_s, 1);
  }
  release.set_value();
  EXPECT_EQ(status_of(first), 200);
  EXPECT_EQ(status_of(kept), 200);
  EXPECT_EQ(status_of(dropped), 499);
  loop.stop();
  const std::string text = metrics_.render();
  EXPECT_EQ(metric(text, "flide_requests_dropped_total"), 1);
  EXPECT_EQ(metric(text, "flide_questions_total"), 4);  // the gate and the kept one
}

TEST_P(EngineLoopTest, ARequestTheModelRejectsFailsAloneAndTheLoopKeepsServing) {
  EngineLoop loop(*model_, options(ExecMode::ExecMode_fork, 8, 100000), metrics_);
  std::promise<void> started, release;
  auto first = loop.submit(gated(request("Gate."), started, release.get_future()), nullptr);
  started.get_future().wait();
  PreparedRequest poisoned = request("Poisoned.");
  poisoned.tree.nodes[0].tokens[0] = int32_t(model_->info().vocab_size);  // outside the vocabulary
  auto good = loop.submit(request("Good."), nullptr);
  auto bad = loop.submit(std::move(poisoned), nullptr);
  PreparedRequest throwing = request("Cannot render.");
  throwing.respond = [](const TreeResult&) -> nlohmann::ordered_json {
    throw std::runtime_error("renderer failed");
  };
  auto unrenderable = loop.submit(std::move(throwing), nullptr);
  release.set_value();
  EXPECT_EQ(status_of(first), 200);
  EXPECT_EQ(status_of(good), 200);  // it shared a round with the poisoned request
  EXPECT_EQ(status_of(bad), 500);
  EXPECT_EQ(status_of(unrenderable), 500);
  auto after = loop.submit(request("After."), nullptr);
  EXPECT_EQ(status_of(after), 200);
}

// The next round is refused at submit while the one before is in flight: that round still lands,
// then the refused one is retried request by request.
TEST_P(EngineLoopTest, ARoundRefusedWhileAnotherIsInFlightFailsOnlyItsCulprit) {
  if (!overlapped_) GTEST_SKIP() << "rounds are in flight together only when they overlap";
  std::promise<void> at_tail, resume;
  std::shared_future<void> resumed = resume.get_future().share();
  overlapped_->on_first_tail = [&] {
    at_tail.set_value();
    resumed.wait();
  };
  EngineLoop loop(*model_, options(ExecMode::ExecMode_fork, 8, 100000), metrics_);
  auto in_flight = loop.submit(request("In flight."), nullptr);
  at_tail.get_future().wait();  // its round is submitted, the next not yet formed
  PreparedRequest poisoned = request("Poisoned.");
  poisoned.tree.nodes[0].tokens[0] = int32_t(model_->info().vocab_size);
  auto good = loop.submit(request("Good."), nullptr);
  auto bad = loop.submit(std::move(poisoned), nullptr);
  resume.set_value();
  EXPECT_EQ(status_of(in_flight), 200);
  EXPECT_EQ(status_of(good), 200);
  EXPECT_EQ(status_of(bad), 500);
  auto after = loop.submit(request("After."), nullptr);
  EXPECT_EQ(status_of(after), 200);
}

// Five requests arrive while one runs: balanced, the next round takes three of the six (half,
// rounded up) and the last two follow; unbalanced, all five go together.
TEST_P(EngineLoopTest, ARoundFormedWhileAnotherRunsTakesHalfTheRequestsWhenBalanced) {
  if (!overlapped_) GTEST_SKIP() << "rounds are formed while another runs only when they overlap";
  for (const bool balance : {true, false}) {
    SCOPED_TRACE(balance ? "balanced" : "unbalanced");
    std::promise<void> at_tail, resume;
    std::shared_future<void> resumed = resume.get_future().share();
    overlapped_->tails = 0;
    overlapped_->on_first_tail = [&] {
      at_tail.set_value();
      resumed.wait();
    };
    Metrics metrics;
    EngineOptions o = options(ExecMode::ExecMode_fork, 8, 100000);
    o.balance_rounds = balance;
    EngineLoop loop(*model_, o, metrics);
    std::vector<std::future<nlohmann::ordered_json>> answers;
    answers.push_back(loop.submit(request("Running."), nullptr));
    at_tail.get_future().wait();  // its round is on the device, the next not yet formed
    for (int i = 0; i < 5; ++i)
      answers.push_back(loop.submit(request(cat("Waiting ", i)), nullptr));
    resume.set_value();
    for (auto& answer : answers) EXPECT_EQ(status_of(answer), 200);
    loop.stop();
    const std::string text = metrics.render();
    EXPECT_EQ(metric(text, "flide_round_requests_sum"), 6);
    EXPECT_EQ(metric(text, "flide_round_requests_count"), balance ? 3 : 2);
  }
}

TEST_P(EngineLoopTest, StoppingAnswersTheAdmittedRequestsAndRefusesNewOnes) {
  EngineLoop loop(*model_, options(ExecMode::ExecMode_fork, 4096, 100000), metrics_);
  std::promise<void> started, release;
  auto first = loop.submit(gated(request("Gate."), started, release.get_future()), nullptr);
  started.get_future().wait();
  std::vector<std::future<nlohmann::ordered_json>> waiting;
  for (int i = 0; i < 3; ++i) waiting.push_back(loop.submit(request(cat("Waiting ", i)), nullptr));
  std::thread stopper([&] { loop.stop(); });  // returns once every admitted request is answered
  while (!loop.stopping()) std::this_thread::yield();
  try {
    loop.submit(request("After stop."), nullptr);
    ADD_FAILURE() << "admitted after stop()";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 503);
  }
  EXPECT_TRUE(loop.stopping());
  release.set_value();
  stopper.join();
  EXPECT_EQ(status_of(first), 200);
  for (auto& answer : waiting) EXPECT_EQ(status_of(answer), 200);
  EXPECT_EQ(metric(metrics_.render(), "flide_queue_depth"), 0);
}

INSTANTIATE_TEST_SUITE_P(Rounds, EngineLoopTest, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "Overlapped" : "OneAtATime");
});

}  // namespace
}  // namespace flide::test
