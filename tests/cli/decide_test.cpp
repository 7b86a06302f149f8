// `flide decide` on the shipped tiny model: the example requests, token-id requests without a
// tokenizer, fork == independent, and bad lines that are reported (line and field named) while
// every other line is still answered.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include "cli_runner.h"

namespace flide::test {
namespace {

using nlohmann::json;

const std::string kExamples = std::string(FLIDE_SOURCE_DIR) + "/examples/requests.jsonl";
const std::string kExampleIds = std::string(FLIDE_SOURCE_DIR) + "/examples/requests_ids.jsonl";

std::string decide(const std::filesystem::path& model, const std::string& input,
                   const std::string& extra = "") {
  return "decide --model " + shell_quote(model.string()) + " --input " + shell_quote(input) +
         " --threads 2 " + extra;
}

// An answer line is well formed for a request line: same ids, one distribution per question
// over its options, choice = first argmax, token counts and time present.
void expect_answer(const json& answer, const json& request) {
  ASSERT_TRUE(answer.contains("questions")) << answer.dump();
  EXPECT_EQ(answer["id"], request.value("id", json()));
  ASSERT_EQ(answer["questions"].size(), request["questions"].size());
  for (size_t q = 0; q < answer["questions"].size(); ++q) {
    const json& got = answer["questions"][q];
    const json& asked = request["questions"][q];
    EXPECT_EQ(got["id"], asked.value("id", json()));
    const std::vector<double> probs = got["probs"].get<std::vector<double>>();
    const size_t n =
        asked.contains("options") ? asked["options"].size() : asked["label_ids"].size();
    ASSERT_EQ(probs.size(), n);
    EXPECT_NEAR(std::accumulate(probs.begin(), probs.end(), 0.0), 1.0, 1e-6);
    const size_t choice = got["choice"].get<size_t>();
    EXPECT_EQ(choice, size_t(std::max_element(probs.begin(), probs.end()) - probs.begin()));
  }
  EXPECT_GT(answer["tokens"]["trunk"].get<int64_t>(), 0);
  EXPECT_GE(answer["tokens"]["branches"].get<int64_t>(), int64_t(request["questions"].size()));
  EXPECT_GE(answer["ms"].get<double>(), 0.0);
}

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return json_lines(text.str());
}

TEST(CliDecideTest, AnswersTheExamples) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const CliResult r = run_flide(decide(tiny_model_dir(), kExamples));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> requests = read_jsonl(kExamples);
  const std::vector<json> answers = json_lines(r.out);
  ASSERT_EQ(answers.size(), requests.size()) << r.out;
  size_t labelled = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_answer(answers[i], requests[i]);
    for (const json& q : requests[i]["questions"])
      labelled += q.contains("answer") && !q["answer"].is_null();
  }
  const std::string n_labelled = std::to_string(labelled);
  EXPECT_NE(r.err.find("/" + n_labelled + " = "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(fork, f32)"), std::string::npos) << r.err;
}

TEST(CliDecideTest, TokenIdRequestsNeedNoTokenizer) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ScratchDir dir;
  const std::filesystem::path model = dir.path() / "model";
  std::filesystem::copy(tiny_model_dir(), model, std::filesystem::copy_options::recursive);
  std::filesystem::remove(model / "tokenizer.json");

  const CliResult r = run_flide(decide(model, kExampleIds));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<json> requests = read_jsonl(kExampleIds);
  const std::vector<json> answers = json_lines(r.out);
  ASSERT_EQ(answers.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_answer(answers[i], requests[i]);
    size_t branches = 0;
    for (const json& q : requests[i]["questions"]) branches += q["ids"].size();
    EXPECT_EQ(answers[i]["tokens"]["trunk"], requests[i]["context_ids"].size());
    EXPECT_EQ(answers[i]["tokens"]["branches"], branches);
  }

  // A text request against the same directory names the missing file.
  const CliResult text = run_flide(decide(model, kExamples));
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.err.find("tokenizer.json"), std::string::npos) << text.err;
}

TEST(CliDecideTest, ForkMatchesIndependentInF64) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const CliResult fork = run_flide(decide(tiny_model_dir(), kExamples, "--dtype f64"));
  const CliResult independent =
      run_flide(decide(tiny_model_dir(), kExamples, "--dtype f64 --mode independent"));
  ASSERT_EQ(fork.exit_code, 0) << fork.err;
  ASSERT_EQ(independent.exit_code, 0) << independent.err;
  EXPECT_NE(independent.err.find("(independent, f64)"), std::string::npos) << independent.err;
  const std::vector<json> a = json_lines(fork.out), b = json_lines(independent.out);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t q = 0; q < a[i]["questions"].size(); ++q) {
      const auto pa = a[i]["questions"][q]["probs"].get<std::vector<double>>();
      const auto pb = b[i]["questions"][q]["probs"].get<std::vector<double>>();
      ASSERT_EQ(pa.size(), pb.size());
      // The exactness claim of forking: float64 agreement to 1e-12 (JSON keeps 17 digits).
      for (size_t o = 0; o < pa.size(); ++o) EXPECT_NEAR(pa[o], pb[o], 1e-12) << i << "/" << q;
    }
}

// Text questions take the calibration's choice temperature (by bucket); token-id questions,
// which are not OpenJev prompts, stay at T = 1.
TEST(CliDecideTest, CalibrationTempersTextQuestionsOnly) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ScratchDir dir;
  const std::filesystem::path table =
      dir.write("table.json",
                R"({"decision_calibration": {"temperature": {"choice": 0.6, "choice.2": 2.5}}})");
  const std::string flag = "--dtype f64 --calibration " + shell_quote(table.string());
  for (const std::string& input : {kExamples, kExampleIds}) {
    const CliResult plain = run_flide(decide(tiny_model_dir(), input, "--dtype f64"));
    const CliResult tempered = run_flide(decide(tiny_model_dir(), input, flag));
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    ASSERT_EQ(tempered.exit_code, 0) << tempered.err;
    const std::vector<json> a = json_lines(plain.out), b = json_lines(tempered.out);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t q = 0; q < a[i]["questions"].size(); ++q) {
        const auto p = a[i]["questions"][q]["probs"].get<std::vector<double>>();
        const auto got = b[i]["questions"][q]["probs"].get<std::vector<double>>();
        const double t = input == kExampleIds ? 1.0 : p.size() <= 2 ? 2.5 : 0.6;
        double total = 0.0;
        for (double x : p) total += std::pow(x, 1.0 / t);
        ASSERT_EQ(got.size(), p.size());
        for (size_t o = 0; o < p.size(); ++o)
          EXPECT_NEAR(got[o], std::pow(p[o], 1.0 / t) / total, 1e-12) << i << "/" << q;
      }
  }
}

TEST(CliDecideTest, OutputFile) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  ScratchDir dir;
  const std::filesystem::path out = dir.path() / "answers.jsonl";
  const CliResult r =
      run_flide(decide(tiny_model_dir(), kExampleIds, "--output " + shell_quote(out.string())));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(read_jsonl(out.string()).size(), 2u);
}

std::string options_json(int n) {
  json options = json::array();
  for (int i = 0; i < n; ++i) options.push_back("choice " + std::to_string(i));
  return options.dump();
}

TEST(CliDecideTest, BadLinesAreReportedAndTheOthersAnswered) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const int64_t vocab = tiny_model_vocab_size();
  const std::string good =
      R"({"id": "good", "context": "The sky is green today.", "questions": [{"id": "q", "question": "What colour is the sky?", "options": ["blue", "green"], "answer": 1}]})";
  const std::string good_ids =
      R"({"context_ids": [1, 2, 3], "questions": [{"ids": [4], "label_ids": [5, 6]}]})";
  struct Bad {
    std::string line;
    std::string message;  // expected after "line N: "
  };
  const std::vector<Bad> bad = {
      {R"({"id": "broken", "context": )", "not valid JSON"},
      {R"({"id": "huge", "context": "c", "questions": [{"question": "q", "options": ["a"], "answer": 1e999}]})",
       "a number too large for a double: number overflow parsing '1e999'"},
      {R"({"id": "zero", "context": "c", "questions": [{"question": "q", "options": []}]})",
       R"("questions"[0].options: no options)"},
      {R"({"id": "many", "context": "c", "questions": [{"question": "q", "options": ["a"]}, {"question": "q", "options": )" +
           options_json(53) + "}]}",
       R"("questions"[1].options: 53 options, at most 52 are supported)"},
      {R"([1, 2])", "a request must be a JSON object, got array"},
      {R"({"id": "empty", "context": "", "questions": [{"question": "q", "options": ["a"]}]})",
       R"("context": empty)"},
      {R"({"context": 5, "questions": []})", R"("context": must be a string, got number)"},
      {R"({"context": "c"})", R"("questions": missing)"},
      {R"({"context": "c", "questions": {}})", R"("questions": must be an array, got object)"},
      {R"({"context": "c", "questions": [{"options": ["a"]}]})",
       R"("questions"[0].question: missing)"},
      {R"({"context": "c", "questions": [{"question": "q", "options": ["a", 7]}]})",
       R"("questions"[0].options[1]: must be a string, got number)"},
      {R"({"context": "c", "questions": [{"question": "q", "options": ["a", "b"], "answer": 2}]})",
       R"("questions"[0].answer: 2 is not an option index (0 to 1))"},
      {R"({"id": [1], "context": "c", "questions": [{"question": "q", "options": ["a"]}]})",
       R"("id": must be a string or an integer, got array)"},
      {R"({"context": "c", "context_ids": [1], "questions": []})",
       R"("context_ids": give either "context" or "context_ids")"},
      {R"({"questions": []})", R"("context": missing)"},
      {R"({"context_ids": [1, )" + std::to_string(vocab) +
           R"(], "questions": [{"ids": [4], "label_ids": [5]}]})",
       R"("context_ids"[1]: token id )" + std::to_string(vocab) + " outside the vocabulary"},
      {R"({"context_ids": [1], "questions": [{"ids": [], "label_ids": [5]}]})",
       R"("questions"[0].ids: no token ids)"},
      {R"({"context_ids": [1], "questions": [{"ids": [2], "label_ids": [5, 5]}]})",
       R"("questions"[0].label_ids[1]: token id 5 repeated)"},
      {R"({"context_ids": [1.5], "questions": [{"ids": [2], "label_ids": [5]}]})",
       R"("context_ids"[0]: must be an integer, got number)"},
  };

  // Good lines first and last, bad ones in between, and a blank line (skipped, but counted).
  std::string input = good + "\n\n";
  for (const Bad& b : bad) input += b.line + "\n";
  input += good_ids + "\n" + good + "\n";
  ScratchDir dir;
  const CliResult r = run_flide(decide(tiny_model_dir(), dir.write("in.jsonl", input).string()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.signal, 0);

  const std::vector<json> answers = json_lines(r.out);
  ASSERT_EQ(answers.size(), bad.size() + 3) << r.out;
  expect_answer(answers.front(), json::parse(good));
  expect_answer(answers[answers.size() - 2], json::parse(good_ids));
  expect_answer(answers.back(), json::parse(good));
  for (size_t i = 0; i < bad.size(); ++i) {
    const size_t line = i + 3;  // line 1 is good, line 2 blank
    const json& answer = answers[i + 1];
    EXPECT_EQ(answer.value("line", 0u), line) << answer.dump();
    EXPECT_NE(answer.value("error", "").find(bad[i].message), std::string::npos) << answer.dump();
    const std::string reported =
        "flide: error: line " + std::to_string(line) + ": " + bad[i].message;
    EXPECT_NE(r.err.find(reported), std::string::npos) << "missing: " << reported << "\n" << r.err;
  }
  EXPECT_EQ(answers[1]["id"], json());  // unreadable lines: null id
  EXPECT_EQ(answers[2]["id"], json());
  EXPECT_EQ(answers[3]["id"], "zero");
  // Accuracy counts the answered lines only: the good line, twice.
  EXPECT_NE(r.err.find("accuracy: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/2 = "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace flide::test
