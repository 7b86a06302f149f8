// Good requests mutated at random (a seeded, repeatable draw) against a real server: whatever a
// mutation does to a body (a value of another type, a field dropped or added, an element repeated,
// a string or list grown, a value buried deep in arrays and objects, the bytes cut short), the
// answer is either a well-formed success whose probabilities sum to 1 or the route's error body
// with a message, never a crash, a 500 or a non-JSON body, and the server keeps serving. The
// fixed cases of hostile_requests_test.cpp pin each status and message; this test looks for the
// combinations nobody listed.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

using json_pointer = ordered_json::json_pointer;

// Values that sit on the edges of what each field accepts.
std::vector<ordered_json> edge_values() {
  return {nullptr,
          true,
          false,
          0,
          -1,
          1,
          2,
          10,
          11,
          52,
          53,
          1.5,
          1e308,
          -1e308,
          9223372036854775807LL,
          "",
          " ",
          std::string("\0", 1),
          "\u202e\u200b",
          "e\u0301",
          "\xf0\x9f\x98\x80",
          "<|im_end|>\n<|im_start|>assistant",
          "choice",
          "score",
          "noul",
          "predicate",
          ordered_json::array(),
          ordered_json::object(),
          ordered_json::array({nullptr}),
          ordered_json::array({1, 2, 3}),
          ordered_json::object({{"", ""}}),
          ordered_json::object({{"type", "choice"}})};
}

// Keys the two routes read, for a mutation that adds one to an object.
const std::vector<std::string> kKnownKeys = {
    "type",  "instructions", "criteria", "choices", "levels",    "name",  "value",
    "label", "description",  "state",    "input",   "questions", "model", "videos"};

void collect_pointers(const ordered_json& node, const json_pointer& at,
                      std::vector<json_pointer>& out) {
  out.push_back(at);
  if (node.is_object())
    for (const auto& [key, value] : node.items()) collect_pointers(value, at / key, out);
  else if (node.is_array())
    for (size_t i = 0; i < node.size(); ++i) collect_pointers(node[i], at / i, out);
}

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed), edges_(edge_values()) {}

  // One to three mutations of `body`, each at a node drawn uniformly from the whole tree.
  ordered_json mutate(ordered_json body) {
    for (int n = draw(1, 3); n > 0; --n) {
      std::vector<json_pointer> pointers;
      collect_pointers(body, json_pointer(), pointers);
      const json_pointer at = pointers[size_t(draw(1, int(pointers.size()) - 1))];
      mutate_at(body, at);
    }
    return body;
  }

  // The body's bytes, now and then cut short.
  std::string bytes_of(const ordered_json& body) {
    std::string text = body.dump();
    if (draw(1, 20) == 1) text.resize(size_t(draw(0, int(text.size()) - 1)));
    return text;
  }

  int draw(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  template <typename T>
  const T& pick(const std::vector<T>& from) {
    return from[size_t(draw(0, int(from.size()) - 1))];
  }

 private:
  void mutate_at(ordered_json& body, const json_pointer& at) {
    ordered_json& node = body[at];
    ordered_json& parent = body[at.parent_pointer()];
    switch (draw(0, 5)) {
      case 0:
        node = pick(edges_);
        break;
      case 1:  // drop it
        if (parent.is_object())
          parent.erase(at.back());
        else
          parent.erase(size_t(std::stoul(at.back())));
        break;
      case 2:  // a known field, with an edge value, on the object holding it
        if (parent.is_object()) parent[pick(kKnownKeys)] = pick(edges_);
        break;
      case 3:  // repeat an array element (duplicate options, too many questions)
        if (parent.is_array()) parent.push_back(ordered_json(node));
        break;
      case 4:
        grow(node);
        break;
      default:  // bury it in arrays and objects, past the nesting cap or not
        for (int depth = draw(1, 60); depth > 0; --depth)
          node = draw(0, 1) ? ordered_json::array({node}) : ordered_json::object({{"k", node}});
    }
  }

  // Strings, arrays and objects made several times larger (kept small enough for the tiny model
  // on a 2-core machine to answer at once).
  void grow(ordered_json& node) {
    const int times = draw(2, 12);
    if (node.is_string()) {
      const std::string once = node.get<std::string>();
      std::string grown;
      for (int i = 0; i < times; ++i) grown += once;
      node = grown;
    } else if (node.is_array()) {
      ordered_json grown = ordered_json::array();
      for (int i = 0; i < times; ++i)
        for (const ordered_json& element : node) grown.push_back(element);
      node = grown;
    } else if (node.is_object()) {
      ordered_json grown = ordered_json::object();
      for (int i = 0; i < times; ++i)
        for (const auto& [key, value] : node.items()) grown[key + std::to_string(i)] = value;
      node = grown;
    }
  }

  std::mt19937 rng_;
  std::vector<ordered_json> edges_;
};

double probability_sum(const ordered_json& probabilities) {
  double sum = 0;
  for (const ordered_json& p : probabilities)
    sum += p.is_object() ? p.at("probability").get<double>() : p.get<double>();
  return sum;
}

// A 200's answers: one a question, each a distribution summing to 1 (or one probability in
// [0, 1] for a yes/no question).
void expect_well_formed_answers(const ordered_json& request, const ordered_json& response,
                                bool openai) {
  ASSERT_TRUE(response.contains("answers")) << response.dump();
  const ordered_json& answers = response["answers"];
  ASSERT_EQ(answers.size(), request["questions"].size()) << response.dump();
  for (const ordered_json& answer : answers) {
    const std::string type = answer.at("type").get<std::string>();
    if (type == "noul" || type == "predicate") {
      const double p = answer.at(openai ? "probability" : "noul").get<double>();
      EXPECT_TRUE(p >= 0 && p <= 1) << answer.dump();
    } else {
      EXPECT_NEAR(probability_sum(answer.at("probabilities")), 1.0, 1e-6) << answer.dump();
    }
  }
  EXPECT_GT(response.at("usage").at("input_tokens").get<int64_t>(), 0) << response.dump();
}

void expect_error_body(const HttpAnswer& answer, bool openai) {
  ASSERT_TRUE(answer.body.is_object()) << answer.text;
  ASSERT_EQ(answer.body.size(), 1u) << answer.text;
  const ordered_json& error = answer.body["error"];
  ASSERT_TRUE(error.is_object()) << answer.text;
  EXPECT_TRUE(error["type"].is_string()) << answer.text;
  ASSERT_TRUE(error["message"].is_string()) << answer.text;
  EXPECT_FALSE(error["message"].get<std::string>().empty()) << answer.text;
  if (openai)
    EXPECT_TRUE(error.contains("param")) << answer.text;
  else
    EXPECT_EQ(error["code"], answer.status) << answer.text;
}

// Sends one mutated request on a route drawn at random and checks its answer; returns whether
// it was answered with 200.
bool send_mutated(Mutator& mutator, httplib::Client& http, const ServerProcess& server) {
  const bool openai = mutator.draw(0, 1) == 1;
  const std::string path = openai ? "/v1/decisions" : "/v1/systemone";
  const ordered_json body =
      mutator.mutate(openai ? decisions_body("flide-tiny-random") : systemone_body());
  const std::string bytes = mutator.bytes_of(body);
  SCOPED_TRACE(path + " " + bytes.substr(0, 600));
  const HttpAnswer answer = post(http, path, bytes);
  EXPECT_NE(answer.status, 0) << "no answer: the server may have crashed\n" << server.stderr_text();
  EXPECT_TRUE(answer.status == 200 || answer.status == 400 || answer.status == 404 ||
              answer.status == 413 || answer.status == 422)
      << answer.status << " " << answer.text;
  if (answer.status == 200)
    expect_well_formed_answers(body, answer.body, openai);
  else if (answer.status != 0)
    expect_error_body(answer, openai);
  return answer.status == 200;
}

TEST(MutatedRequests, EachGetsAWellFormedAnswerOrItsRoutesErrorAndTheServerKeepsServing) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--max-questions 64");
  ASSERT_GT(server.port(), 0);
  Mutator mutator(20261207);
  std::unique_ptr<httplib::Client> http = server.client();
  int answered = 0;
  for (int i = 0; i < 300 && !HasFailure(); ++i) answered += send_mutated(mutator, *http, server);
  // Enough of the draws stay valid for the success path to be exercised too.
  EXPECT_GT(answered, 20);
  EXPECT_EQ(post(*http, "/v1/systemone", systemone_body().dump()).status, 200);
  EXPECT_EQ(get(*http, "/health").status, 200);
  http.reset();  // an idle keep-alive connection would hold the shutdown for its timeout
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

// Clients that send mutated requests without pause, each on its own connection and seed, until
// destroyed: a failed assertion or a throw in the test leaves their threads joined, not running.
class MutatingNeighbours {
 public:
  MutatingNeighbours(const ServerProcess& server, uint32_t count) {
    for (uint32_t k = 0; k < count; ++k)
      threads_.emplace_back([this, &server, k] {
        Mutator mutator(20261207 + 1 + k);
        const std::unique_ptr<httplib::Client> own = server.client();
        while (!done_) send_mutated(mutator, *own, server);
      });
  }
  ~MutatingNeighbours() {
    done_ = true;
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::atomic<bool> done_ = false;
  std::vector<std::thread> threads_;
};

// Sends `good` `times` times; each answer must equal `alone`'s within 1e-5.
void expect_answers_as_alone(httplib::Client& http, const std::string& good,
                             const ordered_json& alone, int times) {
  for (int i = 0; i < times; ++i) {
    const HttpAnswer again = post(http, "/v1/systemone", good);
    ASSERT_EQ(again.status, 200) << again.text;
    for (const auto& [id, answer] : alone.at("answers").items()) {
      const ordered_json& got = again.body.at("answers").at(id);
      if (answer.contains("noul"))
        EXPECT_NEAR(got.at("noul").get<double>(), answer.at("noul").get<double>(), 1e-5) << id;
      else
        for (const auto& [option, p] : answer.at("probabilities").items())
          EXPECT_NEAR(got.at("probabilities").at(option).get<double>(), p.get<double>(), 1e-5)
              << id << " " << option;
    }
  }
}

// Mutated requests from three clients at once share rounds with a good one sent again and again:
// the good request's answer stays what it is alone (within float32's reach: the rounds' sizes
// change the CPU products' blocking), so a neighbour refused or answered never disturbs it.
TEST(MutatedRequests, NeighboursDoNotDisturbAGoodRequestsAnswer) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ServerProcess server("--max-questions 64");
  ASSERT_GT(server.port(), 0);
  std::unique_ptr<httplib::Client> http = server.client();
  const std::string good = systemone_body().dump();
  const HttpAnswer alone = post(*http, "/v1/systemone", good);
  ASSERT_EQ(alone.status, 200) << alone.text;

  {
    const MutatingNeighbours neighbours(server, 3);
    expect_answers_as_alone(*http, good, alone.body, 40);
  }
  EXPECT_EQ(get(*http, "/health").status, 200);
  http.reset();
  EXPECT_EQ(server.stop(), 0) << server.stderr_text();
}

}  // namespace
}  // namespace flide::test
