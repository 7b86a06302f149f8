// JSON given to the model as text must be byte for byte what Python's
// json.dumps(value, ensure_ascii=False) writes (the OpenJev helper's rendering, §1.4). The
// expected strings below were produced by Python 3.11.
#include "server/routes/json_text.h"

#include <gtest/gtest.h>

namespace flide::server {
namespace {

using json = nlohmann::ordered_json;

std::string text(const std::string& json_source) {
  return json_text(json::parse(json_source));
}

TEST(JsonTextTest, SeparatorsKeyOrderAndEscapes) {
  EXPECT_EQ(
      text(
          R"({"b": 1, "a": [1, 2.5, {"x": null}], "é": "naïve \"q\" \\ /\n\t\u0001\u007f 🙂"})"),
      "{\"b\": 1, \"a\": [1, 2.5, {\"x\": null}], \"é\": \"naïve \\\"q\\\" \\\\ /\\n\\t"
      "\\u0001\x7f 🙂\"}");
  EXPECT_EQ(text("[]"), "[]");
  EXPECT_EQ(text("{}"), "{}");
  EXPECT_EQ(text("true"), "true");
  EXPECT_EQ(text(R"("x")"), "\"x\"");
  EXPECT_EQ(text("123456789012345678"), "123456789012345678");
}

TEST(JsonTextTest, FloatsAsPythonRepr) {
  EXPECT_EQ(text("1e15"), "1000000000000000.0");  // nlohmann alone writes 1e+15
  EXPECT_EQ(text("1e16"), "1e+16");
  EXPECT_EQ(text("123.0"), "123.0");
  EXPECT_EQ(text("0.0001"), "0.0001");
  EXPECT_EQ(text("1e-05"), "1e-05");
  EXPECT_EQ(text("-0.0"), "-0.0");
  EXPECT_EQ(text("1.5e300"), "1.5e+300");
  EXPECT_EQ(text("2.5e-7"), "2.5e-07");
  EXPECT_EQ(text("12345678.9"), "12345678.9");
  EXPECT_EQ(text("0.30000000000000004"), "0.30000000000000004");
}

}  // namespace
}  // namespace flide::server
