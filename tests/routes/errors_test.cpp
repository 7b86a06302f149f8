// The status <-> type table and both error bodies (decision_api.md §1.5, §2.5), the raw-text
// nesting check that runs before parsing (§1.1), and the size budgets' refusals (§1.1).
#include "server/routes/errors.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "route_fixture.h"
#include "server/routes/budgets.h"
#include "server/routes/json_depth.h"

namespace flide::server {
namespace {

using test::json;
using test::refusal;

std::vector<std::string> keys(const json& object) {
  std::vector<std::string> out;
  for (const auto& [key, value] : object.items()) out.push_back(key);
  return out;
}

TEST(ErrorsTest, StatusTypeTable) {
  const Route s1 = Route::Route_systemone;
  const Route oa = Route::Route_decisions;
  struct Row {
    ApiError error;
    int status;
    const char* type;
  };
  const std::vector<Row> rows = {
      {malformed_json("x"), 400, "invalid_request_error"},
      {invalid_field(s1, "state", "x"), 422, "unprocessable_entity_error"},
      {invalid_field(oa, "input", "x"), 400, "invalid_request_error"},
      {exceed_context(s1, "questions.q", "x"), 400, "exceed_context_size_error"},
      {exceed_context(oa, "questions[0]", "x"), 400, "invalid_request_error"},
      {not_found("model", "x"), 404, "not_found_error"},
      {too_large("x"), 413, "request_too_large_error"},
      {rate_limited("x", 3), 429, "rate_limit_error"},
      {not_supported("x"), 501, "not_supported_error"},
      {unavailable("x"), 503, "unavailable_error"},
  };
  std::set<std::string> types;
  for (const Row& row : rows) {
    EXPECT_EQ(row.error.status, row.status) << row.type;
    EXPECT_EQ(row.error.type, row.type);
    EXPECT_EQ(row.error.retry_after_s, row.status == 429 ? 3 : 0);
    types.insert(row.error.type);
  }
  EXPECT_EQ(types.size(), 8u);  // one type per status, plus 400's exceed_context_size_error
  EXPECT_EQ(rate_limited("x", 0).retry_after_s, 1);  // Retry-After is at least 1 s
}

TEST(ErrorsTest, SystemOneBody) {
  const json body =
      error_body(invalid_field(Route::Route_systemone, "questions.q.criteria", "must be provided"),
                 Route::Route_systemone);
  EXPECT_EQ(keys(body), std::vector<std::string>({"error"}));
  EXPECT_EQ(keys(body["error"]), std::vector<std::string>({"message", "type", "code"}));
  EXPECT_EQ(body["error"]["message"], "questions.q.criteria: must be provided");
  EXPECT_EQ(body["error"]["type"], "unprocessable_entity_error");
  EXPECT_EQ(body["error"]["code"], 422);  // code == status, an integer
  EXPECT_EQ(error_body(too_large("big"), Route::Route_systemone)["error"]["code"], 413);
}

TEST(ErrorsTest, OpenAiBody) {
  const json body =
      error_body(invalid_field(Route::Route_decisions, "questions[1].choices", "must be provided"),
                 Route::Route_decisions);
  EXPECT_EQ(keys(body), std::vector<std::string>({"error"}));
  EXPECT_EQ(keys(body["error"]), std::vector<std::string>({"message", "type", "param", "code"}));
  EXPECT_EQ(body["error"]["message"], "questions[1].choices: must be provided");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "questions[1].choices");
  EXPECT_TRUE(body["error"]["code"].is_null());
  EXPECT_TRUE(
      error_body(malformed_json("bad"), Route::Route_decisions)["error"]["param"].is_null());
}

std::string nested_state(int depth) {
  return R"({"state": )" + std::string(size_t(depth), '[') + std::string(size_t(depth), ']') +
         R"(, "questions": {}})";
}

TEST(JsonDepthTest, FortyDeepStateIsRefusedThirtyNineIsNot) {
  const auto e =
      refusal([] { check_json_depth(nested_state(40), kMaxJsonDepth, Route::Route_systemone); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 422);
  EXPECT_EQ(std::string(e->what()), "state: nested too deeply (more than 40 levels)");
  EXPECT_NO_THROW(check_json_depth(nested_state(39), kMaxJsonDepth, Route::Route_systemone));
}

TEST(JsonDepthTest, FiveThousandDeepIsARefusal) {
  const auto e =
      refusal([] { check_json_depth(nested_state(5000), kMaxJsonDepth, Route::Route_systemone); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 422);
  EXPECT_NE(std::string(e->what()).find("nested too deeply"), std::string::npos);
  // Unbalanced (not JSON at all): still refused on depth, before the parser sees it.
  EXPECT_THROW(check_json_depth(std::string(5000, '['), kMaxJsonDepth, Route::Route_systemone),
               ApiError);
}

TEST(JsonDepthTest, NamesTheMemberAndIgnoresBracketsInStrings) {
  const std::string body = R"({"model": "[[[[[[", "state": "{{{{\"[[[[", "input": )" +
                           std::string(41, '[') + std::string(41, ']') + "}";
  const auto e = refusal([&] { check_json_depth(body, kMaxJsonDepth, Route::Route_decisions); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "input");
  EXPECT_NO_THROW(check_json_depth(R"({"state": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})",
                                   kMaxJsonDepth, Route::Route_systemone));
  const auto top =
      refusal([] { check_json_depth(std::string(41, '['), 40, Route::Route_systemone); });
  ASSERT_TRUE(top);
  EXPECT_EQ(std::string(top->what()),
            "the request body is nested too deeply (more than 40 levels)");
}

TEST(JsonDepthTest, TheDeepestLegalOpenAiBodyFits) {
  // 32 levels of input_json data in input[0].content[0].data (decisions.d.ts's bound).
  const std::string data = std::string(31, '[') + "{}" + std::string(31, ']');
  const std::string body =
      R"({"input": [{"role": "user", "content": [{"type": "input_json", "data": )" + data + "}]}]}";
  EXPECT_NO_THROW(check_json_depth(body, kMaxJsonDepth, Route::Route_decisions));
}

TEST(BudgetsTest, BytePreflight) {
  RouteLimits limits;
  limits.max_prompt_tokens = 48;  // threshold max(4096, 32 * 48) = 4096
  EXPECT_NO_THROW(check_body_size(4096, limits, Route::Route_systemone));
  const auto e = refusal([&] { check_body_size(4097, limits, Route::Route_systemone); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 413);
  EXPECT_EQ(e->type, "request_too_large_error");
  EXPECT_EQ(e->retry_after_s, 0);
  EXPECT_EQ(std::string(e->what()),
            "The request is 4097 bytes, over the 4096 byte threshold for the 48 token budget. "
            "Give a shorter \"state\", fewer questions, or raise the limit with "
            "--max-prompt-tokens");
  limits.max_prompt_tokens = 1000;
  EXPECT_NO_THROW(check_body_size(32000, limits, Route::Route_decisions));
  const auto d = refusal([&] { check_body_size(32001, limits, Route::Route_decisions); });
  ASSERT_TRUE(d);
  EXPECT_NE(std::string(d->what()).find("Give a shorter \"input\""), std::string::npos);
  limits.max_prompt_tokens = 0;  // unlimited
  EXPECT_NO_THROW(check_body_size(size_t(1) << 40, limits, Route::Route_systemone));
}

TEST(BudgetsTest, QuestionCount) {
  RouteLimits limits;
  limits.max_questions = 3;
  EXPECT_NO_THROW(check_question_count(3, limits));
  const auto e = refusal([&] { check_question_count(4, limits); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 413);
  EXPECT_NE(std::string(e->what()).find("\"questions\""), std::string::npos);
  limits.max_questions = 0;
  EXPECT_NO_THROW(check_question_count(100000, limits));
}

TEST(BudgetsTest, PromptTokens) {
  RouteLimits limits;
  limits.max_prompt_tokens = 30;
  limits.max_context_tokens = 12;
  const std::vector<std::string> paths = {"questions.a", "questions.b", "questions.c"};
  EXPECT_NO_THROW(check_prompt_tokens({10, 8, 12}, paths, limits, Route::Route_systemone));
  const auto total = refusal([&] {
    check_prompt_tokens({10, 9, 12}, paths, limits, Route::Route_systemone);
  });
  ASSERT_TRUE(total);
  EXPECT_EQ(total->status, 413);
  EXPECT_NE(std::string(total->what()).find("renders 31 prompt tokens, the maximum is 30"),
            std::string::npos);
  const auto one = refusal([&] {
    check_prompt_tokens({10, 13, 1}, paths, limits, Route::Route_systemone);
  });
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 400);
  EXPECT_EQ(one->type, "exceed_context_size_error");
  EXPECT_NE(std::string(one->what()).find("questions.b: the request (13 tokens)"),
            std::string::npos);
  const auto oa =
      refusal([&] { check_prompt_tokens({13}, {"questions[0]"}, limits, Route::Route_decisions); });
  ASSERT_TRUE(oa);
  EXPECT_EQ(oa->type, "invalid_request_error");
  EXPECT_EQ(oa->param, "questions[0]");
}

}  // namespace
}  // namespace flide::server
