// Malformed and hostile bodies, one table for both routes: each must be refused with the
// status and type of decision_api.md §1.5 (System One: 422) or §2.5 (OpenAI: 400 with "param"),
// and a message that names the field at fault. Every case starts from a valid fixture and
// breaks one thing. (Bodies that are not JSON are the HTTP layer's; nesting depth is
// errors_test.cpp's, as it is checked on the raw text.)
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "route_fixture.h"
#include "server/routes/decisions.h"
#include "server/routes/errors.h"
#include "server/routes/systemone.h"

namespace flide::server {
namespace {

using test::context;
using test::json;

constexpr Route S1 = Route::Route_systemone;
constexpr Route OA = Route::Route_decisions;

struct Case {
  const char* name;
  Route route;
  std::function<void(json&)> mutate;
  int status;
  std::string field;      // must appear in the message (and be OpenAI's "param" on a 400)
  std::string also = "";  // a further substring of the message
};

json options(int n) {
  json out = json::object();
  for (int i = 0; i < n; ++i) out["option " + std::to_string(i)] = nullptr;
  return out;
}

json choices(int n) {
  json out = json::array();
  for (int i = 0; i < n; ++i) out.push_back({{"value", "choice " + std::to_string(i)}});
  return out;
}

json levels(int n, bool as_objects) {
  json out = json::array();
  for (int i = 0; i < n; ++i)
    out.push_back(as_objects ? json{{"label", "level " + std::to_string(i)}}
                             : json("level " + std::to_string(i)));
  return out;
}

json systemone_questions(int n) {
  json out = json::object();
  for (int i = 0; i < n; ++i) out[cat("q", i)] = {{"type", "noul"}, {"instructions", "Is it?"}};
  return out;
}

json decisions_questions(int n) {
  json out = json::array();
  for (int i = 0; i < n; ++i) out.push_back({{"type", "predicate"}, {"instructions", "Is it?"}});
  return out;
}

// Shorthands for the fixtures' questions.
json& route_q(json& b) {
  return b["questions"]["route"];
}
json& urgency_q(json& b) {
  return b["questions"]["urgency"];
}
json& angry_q(json& b) {
  return b["questions"]["angry"];
}
json& predicate_q(json& b) {
  return b["questions"][0];
}
json& choice_q(json& b) {
  return b["questions"][1];
}
json& score_q(json& b) {
  return b["questions"][2];
}

std::function<void(json&)> set_input(const char* items) {
  return [items](json& b) { b["input"] = json::parse(items); };
}

const std::vector<Case>& cases() {
  static const std::vector<Case> table = {
      // ---- /v1/systemone: the envelope ----
      {"s1 body is an array", S1, [](json& b) { b = json::array({b}); }, 422, "JSON object"},
      {"s1 model is a number", S1, [](json& b) { b["model"] = 123; }, 422, "model"},
      {"s1 model is null", S1, [](json& b) { b["model"] = nullptr; }, 422, "model"},
      {"s1 state missing", S1, [](json& b) { b.erase("state"); }, 422, "state", "must be provided"},
      {"s1 state null", S1, [](json& b) { b["state"] = nullptr; }, 422, "state", "must be provided"},
      {"s1 state empty string", S1, [](json& b) { b["state"] = ""; }, 422, "state"},
      {"s1 state empty object", S1, [](json& b) { b["state"] = json::object(); }, 422, "state"},
      {"s1 state empty array", S1, [](json& b) { b["state"] = json::array(); }, 422, "state"},
      {"s1 state number", S1, [](json& b) { b["state"] = 42; }, 422, "state"},
      {"s1 state boolean", S1, [](json& b) { b["state"] = true; }, 422, "state"},
      {"s1 questions missing", S1, [](json& b) { b.erase("questions"); }, 422, "questions"},
      {"s1 questions empty", S1, [](json& b) { b["questions"] = json::object(); }, 422,
       "questions"},
      {"s1 questions an array", S1, [](json& b) { b["questions"] = json::array({route_q(b)}); },
       422, "questions"},
      {"s1 questions a string", S1, [](json& b) { b["questions"] = "route"; }, 422, "questions"},
      {"s1 4097 questions", S1, [](json& b) { b["questions"] = systemone_questions(4097); }, 413,
       "questions", "the maximum is 4096"},
      {"s1 401 questions over --max-questions", S1,
       [](json& b) { b["questions"] = systemone_questions(401); }, 413, "questions",
       "the maximum is 400"},
      {"s1 empty question id", S1, [](json& b) { b["questions"][""] = angry_q(b); }, 422,
       "questions", "non-empty"},
      {"s1 question a string", S1, [](json& b) { route_q(b) = "Which team?"; }, 422,
       "questions.route"},
      // ---- /v1/systemone: type ----
      {"s1 type missing", S1, [](json& b) { route_q(b).erase("type"); }, 422,
       "questions.route.type"},
      {"s1 type unknown", S1, [](json& b) { route_q(b)["type"] = "multi"; }, 422,
       "questions.route.type", "choice, score, noul"},
      {"s1 type number", S1, [](json& b) { route_q(b)["type"] = 5; }, 422, "questions.route.type"},
      {"s1 type predicate (OpenAI's)", S1, [](json& b) { angry_q(b)["type"] = "predicate"; }, 422,
       "questions.angry.type"},
      // ---- /v1/systemone: instructions ----
      {"s1 instructions missing", S1, [](json& b) { route_q(b).erase("instructions"); }, 422,
       "questions.route.instructions"},
      {"s1 instructions empty", S1, [](json& b) { route_q(b)["instructions"] = ""; }, 422,
       "questions.route.instructions"},
      {"s1 instructions an empty object", S1, [](json& b) { route_q(b)["instructions"] = json::object(); },
       422, "questions.route.instructions"},
      {"s1 instructions an empty array", S1, [](json& b) { route_q(b)["instructions"] = json::array(); }, 422,
       "questions.route.instructions"},
      {"s1 instructions 0", S1, [](json& b) { route_q(b)["instructions"] = 0; }, 422,
       "questions.route.instructions"},
      {"s1 instructions 1.5", S1, [](json& b) { urgency_q(b)["instructions"] = 1.5; }, 422,
       "questions.urgency.instructions"},
      {"s1 instructions false", S1, [](json& b) { angry_q(b)["instructions"] = false; }, 422,
       "questions.angry.instructions"},
      {"s1 instructions true", S1, [](json& b) { angry_q(b)["instructions"] = true; }, 422,
       "questions.angry.instructions"},
      {"s1 instructions null", S1, [](json& b) { angry_q(b)["instructions"] = nullptr; }, 422,
       "questions.angry.instructions"},
      // ---- /v1/systemone: criteria ----
      {"s1 choice without criteria", S1, [](json& b) { route_q(b).erase("criteria"); }, 422,
       "questions.route.criteria"},
      {"s1 choice criteria null", S1, [](json& b) { route_q(b)["criteria"] = nullptr; }, 422,
       "questions.route.criteria"},
      {"s1 choice with 0 options", S1, [](json& b) { route_q(b)["criteria"] = json::object(); },
       422, "questions.route.criteria", "non-empty object"},
      {"s1 choice criteria an array", S1,
       [](json& b) { route_q(b)["criteria"] = json::array({"billing", "shipping"}); }, 422,
       "questions.route.criteria"},
      {"s1 choice with 53 options", S1, [](json& b) { route_q(b)["criteria"] = options(53); },
       422, "questions.route.criteria", "at most 52 are supported"},
      {"s1 choice description a number", S1, [](json& b) { route_q(b)["criteria"]["billing"] = 1; },
       422, "questions.route.criteria.billing"},
      {"s1 choice description a boolean", S1,
       [](json& b) { route_q(b)["criteria"]["shipping"] = false; }, 422,
       "questions.route.criteria.shipping"},
      {"s1 score with 1 level", S1, [](json& b) { urgency_q(b)["criteria"] = levels(1, false); },
       422, "questions.urgency.criteria", "2 to 10 levels"},
      {"s1 score with 11 levels", S1, [](json& b) { urgency_q(b)["criteria"] = levels(11, false); },
       422, "questions.urgency.criteria", "2 to 10 levels"},
      {"s1 score without criteria", S1, [](json& b) { urgency_q(b).erase("criteria"); }, 422,
       "questions.urgency.criteria"},
      {"s1 score criteria an object", S1,
       [](json& b) { urgency_q(b)["criteria"] = {{"0", "low"}, {"1", "high"}}; }, 422,
       "questions.urgency.criteria"},
      {"s1 score level a number", S1, [](json& b) { urgency_q(b)["criteria"][1] = 3; }, 422,
       "questions.urgency.criteria[1]"},
      {"s1 score level null", S1, [](json& b) { urgency_q(b)["criteria"][0] = nullptr; }, 422,
       "questions.urgency.criteria[0]"},
      {"s1 noul criteria a string", S1, [](json& b) { angry_q(b)["criteria"] = "yes"; }, 422,
       "questions.angry.criteria"},
      {"s1 noul criteria an array", S1,
       [](json& b) { angry_q(b)["criteria"] = json::array({"yes", "no"}); }, 422,
       "questions.angry.criteria"},
      {"s1 noul true description a number", S1,
       [](json& b) { angry_q(b)["criteria"] = {{"true", 1}}; }, 422, "questions.angry.criteria.true"},
      {"s1 noul false description a boolean", S1,
       [](json& b) { angry_q(b)["criteria"] = {{"false", true}}; }, 422,
       "questions.angry.criteria.false"},
      // ---- /v1/systemone: media ----
      {"s1 videos a string", S1, [](json& b) { b["videos"] = ""; }, 422, "videos"},
      {"s1 videos 0", S1, [](json& b) { b["videos"] = 0; }, 422, "videos"},
      {"s1 videos with a string", S1, [](json& b) { b["videos"] = json::array({"x"}); }, 422, "videos"},
      {"s1 videos an object", S1, [](json& b) { b["videos"] = {{"a", 1}}; }, 422, "videos"},
      {"s1 9 images", S1,
       [](json& b) {
         b["images"] = json::array();
         for (int i = 0; i < 9; ++i) b["images"].push_back("data:image/png;base64,AAAA");
       },
       422, "images", "the maximum is 8"},
      {"s1 images a string", S1, [](json& b) { b["images"] = "data:image/png;base64,AAAA"; }, 422,
       "images"},
      {"s1 image an https URL", S1,
       [](json& b) { b["images"] = json::array({"https://example.com/a.png"}); }, 422,
       "images[0]"},
      {"s1 image undecodable", S1,
       [](json& b) { b["images"] = json::array({"data:image/png;base64,@@@@"}); }, 422,
       "images[0]"},
      {"s1 files a number", S1, [](json& b) { b["files"] = json::array({1}); }, 422, "files[0]"},

      // ---- /v1/decisions: the envelope ----
      {"oa body is an array", OA, [](json& b) { b = json::array({b}); }, 400, "", "JSON object"},
      {"oa unknown field", OA, [](json& b) { b["temperature"] = 0.2; }, 400, "temperature"},
      {"oa model missing", OA, [](json& b) { b.erase("model"); }, 400, "model"},
      {"oa model a number", OA, [](json& b) { b["model"] = 5; }, 400, "model"},
      {"oa model null", OA, [](json& b) { b["model"] = nullptr; }, 400, "model"},
      {"oa input missing", OA, [](json& b) { b.erase("input"); }, 400, "input"},
      {"oa input empty", OA, [](json& b) { b["input"] = ""; }, 400, "input"},
      {"oa input an empty array", OA, [](json& b) { b["input"] = json::array(); }, 400, "input"},
      {"oa input a number", OA, [](json& b) { b["input"] = 5; }, 400, "input"},
      {"oa input null", OA, [](json& b) { b["input"] = nullptr; }, 400, "input"},
      {"oa input item a string", OA, set_input(R"(["hello"])"), 400, "input[0]"},
      {"oa input role tool", OA, set_input(R"([{"role": "tool", "content": "x"}])"), 400,
       "input[0].role"},
      {"oa input role missing", OA, set_input(R"([{"content": "x"}])"), 400, "input[0].role"},
      {"oa input item type unknown", OA, set_input(R"([{"type": "reasoning", "summary": []}])"),
       400, "input[0].type"},
      {"oa input content a number", OA, set_input(R"([{"role": "user", "content": 5}])"), 400,
       "input[0].content"},
      {"oa input content missing", OA, set_input(R"([{"role": "user"}])"), 400,
       "input[0].content"},
      {"oa input message unknown field", OA,
       set_input(R"([{"role": "user", "content": "x", "name": "bob"}])"), 400, "input[0].name"},
      {"oa input part type unknown", OA,
       set_input(R"([{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}])"), 400,
       "input[0].content[0].type"},
      {"oa input text part without text", OA,
       set_input(R"([{"role": "user", "content": [{"type": "input_text"}]}])"), 400,
       "input[0].content[0].text"},
      {"oa json part in a system message", OA,
       set_input(R"([{"role": "system", "content": [{"type": "input_json", "data": {}}]}])"), 400,
       "input[0].content[0].type"},
      {"oa image part", OA,
       set_input(R"([{"role": "user", "content": [{"type": "input_image",
                      "image_url": "data:image/png;base64,AAAA"}]}])"),
       400, "input[0].content[0]", "image"},
      {"oa json data a string", OA,
       set_input(R"([{"role": "user", "content": [{"type": "input_json", "data": "x"}]}])"), 400,
       "input[0].content[0].data"},
      {"oa json data of 33 levels", OA,
       [](json& b) {
         json data = json::object();
         for (int i = 0; i < 32; ++i) data = {{"a", data}};
         b["input"] = json::array(
             {{{"role", "user"}, {"content", json::array({{{"type", "input_json"}, {"data", data}}})}}});
       },
       400, "input[0].content[0].data", "32"},
      {"oa breakpoint mode implicit", OA,
       set_input(R"([{"role": "user", "content": [{"type": "input_text", "text": "x",
                      "prompt_cache_breakpoint": {"mode": "implicit"}}]}])"),
       400, "input[0].content[0].prompt_cache_breakpoint.mode"},
      {"oa tool output without its call", OA,
       set_input(R"([{"type": "function_call_output", "call_id": "c9", "output": "x"}])"), 400,
       "input[0].call_id"},
      {"oa function call without name", OA,
       set_input(R"([{"type": "function_call", "call_id": "c1", "arguments": "{}"}])"), 400,
       "input[0].name"},
      {"oa custom tool output answering a function call", OA,
       set_input(R"([{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                     {"type": "custom_tool_call_output", "call_id": "c1", "output": "x"}])"),
       400, "input[1].call_id"},
      {"oa assistant phase unknown", OA,
       set_input(R"([{"role": "assistant", "phase": "draft", "content": "x"}])"), 400,
       "input[0].phase"},
      {"oa assistant input_text part", OA,
       set_input(R"([{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}])"),
       400, "input[0].content[0].type"},
      // ---- /v1/decisions: questions ----
      {"oa questions missing", OA, [](json& b) { b.erase("questions"); }, 400, "questions"},
      {"oa questions an empty array", OA, [](json& b) { b["questions"] = json::array(); }, 400, "questions"},
      {"oa questions an object", OA, [](json& b) { b["questions"] = {{"q", predicate_q(b)}}; },
       400, "questions"},
      {"oa 401 questions", OA, [](json& b) { b["questions"] = decisions_questions(401); }, 400,
       "questions", "1 to 400"},
      {"oa question a string", OA, [](json& b) { predicate_q(b) = "Is it?"; }, 400,
       "questions[0]"},
      {"oa type missing", OA, [](json& b) { predicate_q(b).erase("type"); }, 400,
       "questions[0].type"},
      {"oa type noul (System One's)", OA, [](json& b) { predicate_q(b)["type"] = "noul"; }, 400,
       "questions[0].type"},
      {"oa instructions missing", OA, [](json& b) { predicate_q(b).erase("instructions"); }, 400,
       "questions[0].instructions"},
      {"oa instructions empty", OA, [](json& b) { predicate_q(b)["instructions"] = ""; }, 400,
       "questions[0].instructions"},
      {"oa instructions a number", OA, [](json& b) { predicate_q(b)["instructions"] = 5; }, 400,
       "questions[0].instructions"},
      {"oa instructions null", OA, [](json& b) { predicate_q(b)["instructions"] = nullptr; }, 400,
       "questions[0].instructions"},
      {"oa instructions an object", OA,
       [](json& b) { predicate_q(b)["instructions"] = {{"text", "x"}}; }, 400,
       "questions[0].instructions"},
      {"oa instructions an empty array", OA, [](json& b) { predicate_q(b)["instructions"] = json::array(); },
       400, "questions[0].instructions"},
      {"oa instructions part without text", OA,
       [](json& b) { predicate_q(b)["instructions"] = json::parse(R"([{"type": "input_text"}])"); },
       400, "questions[0].instructions[0].text"},
      {"oa instructions part with a breakpoint", OA,
       [](json& b) {
         predicate_q(b)["instructions"] = json::parse(
             R"([{"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit"}}])");
       },
       400, "questions[0].instructions[0].prompt_cache_breakpoint"},
      {"oa name null", OA, [](json& b) { predicate_q(b)["name"] = nullptr; }, 400,
       "questions[0].name"},
      {"oa name a number", OA, [](json& b) { predicate_q(b)["name"] = 5; }, 400,
       "questions[0].name"},
      {"oa predicate with choices", OA, [](json& b) { predicate_q(b)["choices"] = choices(2); },
       400, "questions[0].choices", "predicate"},
      {"oa predicate with criteria", OA,
       [](json& b) { predicate_q(b)["criteria"] = {{"true", "x"}}; }, 400,
       "questions[0].criteria"},
      {"oa choice without choices", OA, [](json& b) { choice_q(b).erase("choices"); }, 400,
       "questions[1].choices"},
      {"oa choice with 0 choices", OA, [](json& b) { choice_q(b)["choices"] = choices(0); }, 400,
       "questions[1].choices", "2 to 255"},
      {"oa choice with 1 choice", OA, [](json& b) { choice_q(b)["choices"] = choices(1); }, 400,
       "questions[1].choices", "2 to 255"},
      {"oa choice with 53 choices", OA, [](json& b) { choice_q(b)["choices"] = choices(53); }, 400,
       "questions[1].choices", "at most 52 are supported"},
      {"oa choice with 256 choices", OA, [](json& b) { choice_q(b)["choices"] = choices(256); },
       400, "questions[1].choices", "2 to 255"},
      {"oa choices an object", OA, [](json& b) { choice_q(b)["choices"] = {{"a", 1}}; }, 400,
       "questions[1].choices"},
      {"oa choice value missing", OA, [](json& b) { choice_q(b)["choices"][1].erase("value"); },
       400, "questions[1].choices[1].value"},
      {"oa choice value a number", OA, [](json& b) { choice_q(b)["choices"][0]["value"] = 1; },
       400, "questions[1].choices[0].value"},
      {"oa choice value null", OA, [](json& b) { choice_q(b)["choices"][0]["value"] = nullptr; },
       400, "questions[1].choices[0].value"},
      {"oa choice a string", OA, [](json& b) { choice_q(b)["choices"][0] = "returns"; }, 400,
       "questions[1].choices[0]"},
      {"oa duplicate string values", OA,
       [](json& b) { choice_q(b)["choices"].push_back({{"value", "returns"}}); }, 400,
       "questions[1].choices[3].value", "repeats choices[0].value"},
      {"oa duplicate boolean values", OA,
       [](json& b) { choice_q(b)["choices"].push_back({{"value", true}}); }, 400,
       "questions[1].choices[3].value", "repeats choices[1].value"},
      {"oa choice description a number", OA,
       [](json& b) { choice_q(b)["choices"][0]["description"] = 5; }, 400,
       "questions[1].choices[0].description"},
      {"oa choice unknown field", OA, [](json& b) { choice_q(b)["choices"][0]["label"] = "x"; },
       400, "questions[1].choices[0].label"},
      {"oa score with 1 level", OA, [](json& b) { score_q(b)["levels"] = levels(1, true); }, 400,
       "questions[2].levels", "2 to 10"},
      {"oa score with 11 levels", OA, [](json& b) { score_q(b)["levels"] = levels(11, true); },
       400, "questions[2].levels", "2 to 10"},
      {"oa score without levels", OA, [](json& b) { score_q(b).erase("levels"); }, 400,
       "questions[2].levels"},
      {"oa score level a string", OA, [](json& b) { score_q(b)["levels"][0] = "low"; }, 400,
       "questions[2].levels[0]"},
      {"oa score level without label", OA, [](json& b) { score_q(b)["levels"][0].erase("label"); },
       400, "questions[2].levels[0].label"},
      {"oa score with choices", OA, [](json& b) { score_q(b)["choices"] = choices(2); }, 400,
       "questions[2].choices"},
      // ---- /v1/decisions: optional fields ----
      {"oa prompt_cache_key a number", OA, [](json& b) { b["prompt_cache_key"] = 5; }, 400,
       "prompt_cache_key"},
      {"oa prompt_cache_options a string", OA, [](json& b) { b["prompt_cache_options"] = "x"; },
       400, "prompt_cache_options"},
      {"oa prompt_cache_options mode unknown", OA,
       [](json& b) { b["prompt_cache_options"] = {{"mode", "always"}}; }, 400,
       "prompt_cache_options.mode"},
      {"oa prompt_cache_options ttl 1h", OA,
       [](json& b) { b["prompt_cache_options"] = {{"ttl", "1h"}}; }, 400,
       "prompt_cache_options.ttl"},
      {"oa safety_identifier of 129 characters", OA,
       [](json& b) { b["safety_identifier"] = std::string(129, 'u'); }, 400, "safety_identifier"},
      {"oa safety_identifier a number", OA, [](json& b) { b["safety_identifier"] = 5; }, 400,
       "safety_identifier"},
  };
  return table;
}

class MalformedTest : public ::testing::TestWithParam<size_t> {};

TEST_P(MalformedTest, IsRefusedNamingTheField) {
  const Case& c = cases()[GetParam()];
  json body = c.route == S1 ? test::systemone_fixture() : test::decisions_fixture();
  c.mutate(body);
  const auto e = test::refusal([&] {
    c.route == S1 ? prepare_systemone(body, context()) : prepare_decisions(body, context());
  });
  ASSERT_TRUE(e);
  const std::string message = e->what();
  EXPECT_EQ(e->status, c.status) << message;
  const char* type = c.status == 413   ? "request_too_large_error"
                     : c.status == 422 ? "unprocessable_entity_error"
                                       : "invalid_request_error";
  EXPECT_EQ(e->type, type) << message;
  EXPECT_NE(message.find(c.field), std::string::npos) << message;
  EXPECT_NE(message.find(c.also), std::string::npos) << message;
  if (c.route == OA && c.status == 400) {
    EXPECT_EQ(e->param, c.field) << message;
    EXPECT_EQ(message.rfind(c.field.empty() ? "" : c.field + ": ", 0), 0u) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Bodies, MalformedTest, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string name;
                           for (char ch : std::string(cases()[info.param].name))
                             name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

// Hostile values must be refusals, never crashes or other exceptions.
TEST(MalformedTest, HostileValuesAreRefusalsOnly) {
  const std::vector<json> values = {nullptr,
                                    true,
                                    0,
                                    -1,
                                    1e308,
                                    "",
                                    "\xef\xbf\xbf",
                                    json::array(),
                                    json::object(),
                                    json::array({nullptr})};
  for (const Route route : {S1, OA}) {
    const json fixture = route == S1 ? test::systemone_fixture() : test::decisions_fixture();
    std::vector<json::json_pointer> pointers;
    const json flat = fixture.flatten();
    for (const auto& [pointer, leaf] : flat.items()) {
      json::json_pointer p(pointer);
      while (!p.empty()) {
        pointers.push_back(p);
        p = p.parent_pointer();
      }
    }
    for (const json::json_pointer& pointer : pointers)
      for (const json& value : values) {
        json body = fixture;
        body[pointer] = value;
        try {
          if (route == S1)
            prepare_systemone(body, context());
          else
            prepare_decisions(body, context());
        } catch (const ApiError&) {
        } catch (const std::exception& e) {
          ADD_FAILURE() << pointer.to_string() << " = " << value.dump() << ": " << e.what();
        }
      }
  }
}

}  // namespace
}  // namespace flide::server
