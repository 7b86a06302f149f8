// The calibration table of a decision checkpoint (engine/decision_calibration.h): llama.cpp's
// lookup (`<type>.<bucket>`, then `<type>`), vLLM's decision_temperature as the fallback before
// 1, and an error naming the file and key for every malformed entry.
#include "engine/decision_calibration.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace flide {
namespace {

using nlohmann::json;
constexpr QuestionType kChoice = QuestionType::QuestionType_choice;
constexpr QuestionType kScore = QuestionType::QuestionType_score;
constexpr QuestionType kNoul = QuestionType::QuestionType_noul;

TEST(DecisionCalibrationTest, BucketsAreLlamaCpps) {
  EXPECT_EQ(option_bucket(1), "2");
  EXPECT_EQ(option_bucket(2), "2");
  EXPECT_EQ(option_bucket(3), "3_5");
  EXPECT_EQ(option_bucket(5), "3_5");
  EXPECT_EQ(option_bucket(6), "6_10");
  EXPECT_EQ(option_bucket(10), "6_10");
  EXPECT_EQ(option_bucket(11), "11");
  EXPECT_EQ(option_bucket(52), "11");
}

TEST(DecisionCalibrationTest, AConfigWithoutATableIsUncalibrated) {
  for (const DecisionCalibration& c :
       {DecisionCalibration(),
        DecisionCalibration::from_config(json::parse(R"({"hidden_size": 64})"), "config.json")}) {
    for (QuestionType type : {kChoice, kScore, kNoul})
      for (size_t n : {2, 4, 8, 20}) EXPECT_EQ(c.temperature(type, n), 1.0);
    EXPECT_EQ(c.noul_bias(), 0.0);
    EXPECT_EQ(c.describe(), "none (T = 1)");
  }
}

TEST(DecisionCalibrationTest, BucketThenTypeThenAnyTypeThenOne) {
  const auto c = DecisionCalibration::from_config(json::parse(R"({
      "decision_temperature": 2,
      "decision_calibration": {
        "temperature": {"choice": 0.85, "choice.3_5": 0.5, "choice.11": 0.25, "noul.2": 1.5547},
        "noul_bias": 0.125}})"),
                                                  "config.json");
  EXPECT_EQ(c.temperature(kChoice, 2), 0.85);
  EXPECT_EQ(c.temperature(kChoice, 4), 0.5);
  EXPECT_EQ(c.temperature(kChoice, 8), 0.85);
  EXPECT_EQ(c.temperature(kChoice, 30), 0.25);
  EXPECT_EQ(c.temperature(kScore, 4), 2.0);
  EXPECT_EQ(c.temperature(kNoul, 2), 1.5547);
  EXPECT_EQ(c.noul_bias(), 0.125);
  EXPECT_EQ(c.describe(),
            "choice T=0.85, choice.11 T=0.25, choice.3_5 T=0.5, noul.2 T=1.5547, any type T=2, "
            "noul bias 0.125");

  const auto only_vllm =
      DecisionCalibration::from_config(json::parse(R"({"decision_temperature": 0.5})"), "c");
  EXPECT_EQ(only_vllm.temperature(kScore, 10), 0.5);
  EXPECT_EQ(only_vllm.temperature(kNoul, 2), 0.5);
}

void expect_refused(const std::string& config, const std::string& message) {
  try {
    DecisionCalibration::from_config(json::parse(config), "m/config.json");
    ADD_FAILURE() << config << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message) << config;
  }
}

TEST(DecisionCalibrationTest, EveryMalformedEntryIsNamed) {
  expect_refused("[1]", "m/config.json is not a JSON object");
  expect_refused(R"({"decision_temperature": 0})",
                 "m/config.json: decision_temperature must be a number > 0, got 0");
  expect_refused(R"({"decision_temperature": "0.85"})",
                 "m/config.json: decision_temperature must be a number > 0, got \"0.85\"");
  expect_refused(R"({"decision_calibration": [0.85]})",
                 "m/config.json: decision_calibration must be an object");
  expect_refused(R"({"decision_calibration": {"temperature": 0.85}})",
                 "m/config.json: decision_calibration.temperature must be an object");
  expect_refused(R"({"decision_calibration": {"temperature": {"choice": -1}}})",
                 "m/config.json: decision_calibration.temperature.choice must be a number > 0, "
                 "got -1");
  expect_refused(R"({"decision_calibration": {"temperature": {"score.6_10": null}}})",
                 "m/config.json: decision_calibration.temperature.score.6_10 must be a number > "
                 "0, got null");
  const std::string keys =
      "\" (keys are <type> or <type>.<bucket>: types choice, score, noul; buckets 2, 3_5, "
      "6_10, 11)";
  expect_refused(
      R"({"decision_calibration": {"temperature": {"choise": 0.85}}})",
      "m/config.json: decision_calibration.temperature has an unknown key \"choise" + keys);
  expect_refused(R"({"decision_calibration": {"temperature": {"choice.3_4": 0.85}}})",
                 "m/config.json: decision_calibration.temperature has an unknown key "
                 "\"choice.3_4" +
                     keys);
  expect_refused(R"({"decision_calibration": {"noul_bias": "0.1"}})",
                 "m/config.json: decision_calibration.noul_bias must be a number, got \"0.1\"");
  expect_refused(R"({"decision_calibration": {"bias": 0.1}})",
                 "m/config.json: decision_calibration has an unknown key \"bias\" (temperature, "
                 "noul_bias)");
}

}  // namespace
}  // namespace flide
