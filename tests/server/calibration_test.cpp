// A calibrated decision checkpoint served end to end (decision_api.md §1.3, "Temperature /
// calibration"): the same request to an uncalibrated server and to one with a calibration table
// (from --calibration FILE, and from the checkpoint's config.json) answers with
// softmax(s / T + b), recomputed here from the uncalibrated probabilities (p_T ∝ p^(1/T)·e^b;
// float64 servers, so 1e-10), on both routes; confidence comes from the calibrated
// probabilities; a malformed table stops `flide serve` before it listens, naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "server_process.h"
#include "test_requests.h"

namespace flide::test {
namespace {

constexpr double kChoiceT = 0.7, kScoreT = 1.8, kNoulT = 1.5547, kNoulBias = 0.4;

const char* kTable = R"({"temperature": {"choice": 0.7, "score.3_5": 1.8, "noul": 1.5547},
                         "noul_bias": 0.4})";

// p_T ∝ p^(1/T)·e^b over one question's options.
std::vector<double> tempered(const std::vector<double>& p, double t,
                             const std::vector<double>& bias = {}) {
  std::vector<double> q(p.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i)
    total += q[i] = std::exp(std::log(p[i]) / t + (bias.empty() ? 0.0 : bias[i]));
  for (double& x : q) x /= total;
  return q;
}

// noul = p(yes) of two options.
double tempered_noul(double p_yes) {
  return tempered({p_yes, 1.0 - p_yes}, kNoulT, {kNoulBias, 0.0})[0];
}

std::vector<double> systemone_probs(const ordered_json& answer) {
  std::vector<double> p;
  for (const auto& [key, value] : answer["probabilities"].items()) p.push_back(value.get<double>());
  return p;
}

std::vector<double> decisions_probs(const ordered_json& answer) {
  std::vector<double> p;
  for (const auto& entry : answer["probabilities"]) p.push_back(entry["probability"].get<double>());
  return p;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-10) << what << " " << i;
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("flide_calibration_" + std::to_string(getpid()) + "_" + name);
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file) << text;
}

// The shipped checkpoint with `table` as config.json's decision_calibration (the other files
// linked).
std::filesystem::path calibrated_checkpoint(const std::string& name, const ordered_json& table) {
  const std::filesystem::path dir = temp_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(tiny_model_dir()))
    if (entry.path().filename() != "config.json")
      std::filesystem::create_symlink(entry.path(), dir / entry.path().filename());
  ordered_json config = ordered_json::parse(std::ifstream(tiny_model_dir() / "config.json"));
  config["decision_calibration"] = table;
  write_text(dir / "config.json", config.dump(2));
  return dir;
}

TEST(ServeCalibration, AnswersAreTheTemperedSoftmaxOnBothRoutes) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const std::filesystem::path file = temp_path("table.json");
  write_text(file, std::string(R"({"decision_calibration": )") + kTable + "}");
  const std::filesystem::path checkpoint =
      calibrated_checkpoint("checkpoint", ordered_json::parse(kTable));
  ServerProcess plain("--dtype f64");
  ServerProcess flag("--dtype f64 --calibration " + file.string());
  ServerProcess config("--dtype f64", checkpoint);
  ASSERT_GT(plain.port(), 0);
  ASSERT_GT(flag.port(), 0);
  ASSERT_GT(config.port(), 0);
  EXPECT_NE(plain.stderr_text().find("calibration: none (T = 1)"), std::string::npos);
  const std::string described =
      "calibration: choice T=0.7, noul T=1.5547, score.3_5 T=1.8, noul bias 0.4";
  EXPECT_NE(flag.stderr_text().find(described), std::string::npos) << flag.stderr_text();
  EXPECT_NE(config.stderr_text().find(described), std::string::npos) << config.stderr_text();

  const auto ask = [](ServerProcess& server, const std::string& path, const ordered_json& body) {
    auto http = server.client();
    const HttpAnswer a = post(*http, path, body.dump());
    EXPECT_EQ(a.status, 200) << a.text;
    return a.body;
  };
  const ordered_json s1 = ask(plain, "/v1/systemone", systemone_body());
  const ordered_json s1_flag = ask(flag, "/v1/systemone", systemone_body());
  EXPECT_EQ(s1_flag["answers"], ask(config, "/v1/systemone", systemone_body())["answers"]);
  const ordered_json& route = s1_flag["answers"]["route"];
  const std::vector<double> route_p = systemone_probs(route);
  expect_near(route_p, tempered(systemone_probs(s1["answers"]["route"]), kChoiceT), "route");
  EXPECT_NEAR(route["confidence"].get<double>(), choice_confidence(route_p), 1e-6);
  const ordered_json& urgency = s1_flag["answers"]["urgency"];
  expect_near(systemone_probs(urgency),
              tempered(systemone_probs(s1["answers"]["urgency"]), kScoreT), "urgency");
  EXPECT_NEAR(urgency["confidence"].get<double>(), score_confidence(systemone_probs(urgency)),
              1e-6);
  EXPECT_NEAR(s1_flag["answers"]["angry"]["noul"].get<double>(),
              tempered_noul(s1["answers"]["angry"]["noul"].get<double>()), 1e-10);
  EXPECT_EQ(s1_flag["usage"], s1["usage"]);  // the same tokens were computed

  const ordered_json body = decisions_body("flide-tiny-random");
  const ordered_json oa = ask(plain, "/v1/decisions", body);
  const ordered_json oa_flag = ask(flag, "/v1/decisions", body);
  EXPECT_NEAR(oa_flag["answers"][0]["probability"].get<double>(),
              tempered_noul(oa["answers"][0]["probability"].get<double>()), 1e-10);
  expect_near(decisions_probs(oa_flag["answers"][1]),
              tempered(decisions_probs(oa["answers"][1]), kChoiceT), "department");
  expect_near(decisions_probs(oa_flag["answers"][2]),
              tempered(decisions_probs(oa["answers"][2]), kScoreT), "severity");

  for (ServerProcess* server : {&plain, &flag, &config})
    EXPECT_EQ(server->stop(), 0) << server->stderr_text();
  std::filesystem::remove(file);
  std::filesystem::remove_all(checkpoint);
}

// `flide serve ...` run to its exit: status and everything it printed.
CommandResult run_serve(const std::string& args) {
  return run_command(std::string(FLIDE_BINARY) + " serve --port 0 " + args + " 2>&1");
}

TEST(ServeCalibration, AMalformedTableStopsTheServerBeforeItListens) {
  FLIDE_SKIP_WITHOUT_TINY_MODEL();
  const std::filesystem::path checkpoint = calibrated_checkpoint(
      "bad_checkpoint", ordered_json::parse(R"({"temperature": {"choice": 0}})"));
  const auto [status, out] = run_serve("--model " + checkpoint.string());
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("config.json\": decision_calibration.temperature.choice must be a number > "
                     "0, got 0"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("listening on"), std::string::npos) << out;

  const std::filesystem::path file = temp_path("bad_table.json");
  write_text(file, R"({"decision_calibration": {"temperature": {"choice.12": 0.5}}})");
  const auto [status2, out2] =
      run_serve("--model " + tiny_model_dir().string() + " --calibration " + file.string());
  EXPECT_EQ(status2, 2) << out2;
  EXPECT_NE(out2.find("--calibration \"" + file.string() +
                      "\": decision_calibration.temperature has an unknown key \"choice.12\""),
            std::string::npos)
      << out2;

  write_text(file, "{not json");
  const auto [status3, out3] =
      run_serve("--model " + tiny_model_dir().string() + " --calibration " + file.string());
  EXPECT_EQ(status3, 2) << out3;
  EXPECT_NE(out3.find("is not valid JSON"), std::string::npos) << out3;
  std::filesystem::remove(file);
  std::filesystem::remove_all(checkpoint);
}

}  // namespace
}  // namespace flide::test
