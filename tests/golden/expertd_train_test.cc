// Runs the `expertd-train` binary itself (the contract in
// engine/train/tools/expertd_train.cc) on every trainable fixture and checks
// its JSON and --grads_out file against train_golden.json.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "models/safetensors/safetensors_reader.h"
#include "nlohmann/json.hpp"
#include "tests/golden/golden_data.h"
#include "tests/golden/train_golden_data.h"

namespace expertd::golden {
namespace {

constexpr double kGradRelTol = 1e-4;
constexpr double kLossAbsTol = 1e-5;
constexpr double kGradNormRelTol = 1e-5;

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

struct Output {
  int status = -1;
  std::string out, err;
};

Output RunTrain(const std::string& args) {
  const std::string err_file = TmpDir() + "/train_stderr.txt";
  const std::string cmd = "engine/train/tools/expertd-train " + args + " 2>" + err_file;
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) o.out.append(buf, n);
  const int raw = pclose(p);
  o.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream err(err_file);
  o.err.assign(std::istreambuf_iterator<char>(err), {});
  return o;
}

std::string WriteBatch(const TrainGolden& g, const std::string& name) {
  const std::string path = TmpDir() + "/" + name + "_batch.json";
  std::ofstream(path) << nlohmann::json{{"input_ids", g.input_ids}}.dump();
  return path;
}

double MaxRelError(const float* ours, const std::vector<float>& ref) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  return max_ref == 0 ? max_diff : max_diff / max_ref;
}

void CheckGradsFile(const TrainGolden& g, const std::string& path) {
  auto file = models::SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::set<std::string> names;
  for (const models::SafetensorsEntry& e : (*file)->tensors()) {
    names.insert(e.name);
    auto it = g.grads.find(e.name);
    if (it == g.grads.end()) {
      ADD_FAILURE() << e.name << " is in --grads_out; the reference has no gradient for it";
      continue;
    }
    ASSERT_EQ(e.dtype, models::DType::kF32) << e.name;
    ASSERT_EQ(e.shape, it->second.shape) << e.name;
    std::vector<float> ours(e.numel());
    std::memcpy(ours.data(), (*file)->Data(e), e.nbytes());
    EXPECT_LT(MaxRelError(ours.data(), it->second.values), kGradRelTol) << e.name;
  }
  for (const auto& [name, grad] : g.grads) EXPECT_TRUE(names.count(name)) << name << " missing";
}

class ExpertdTrainTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertdTrainTest, MatchesTheReference) {
  const std::string arch = GetParam();
  auto golden = LoadTrainGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::string grads = TmpDir() + "/" + arch + "_grads.safetensors";
  Output o = RunTrain("--model=" + FixtureDir(arch) + " --batch=" + WriteBatch(*golden, arch) +
                      " --steps=" + std::to_string(golden->steps.size()) +
                      " --lr=1e-3 --weight_decay=0.01 --clip_norm=1.0 --threads=2 --grads_out=" +
                      grads);
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ASSERT_EQ(j.size(), 2u) << "exactly steps and loss_after_final_step: " << o.out;
  const nlohmann::json& steps = j.at("steps");
  ASSERT_EQ(steps.size(), golden->steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    const GoldenStep& ref = golden->steps[s];
    ASSERT_EQ(steps[s].size(), 4u) << steps[s];
    EXPECT_NEAR(steps[s].at("loss_total").get<double>(), ref.loss.total, kLossAbsTol) << s;
    EXPECT_NEAR(steps[s].at("ce_loss").get<double>(), ref.loss.ce, kLossAbsTol) << s;
    EXPECT_NEAR(steps[s].at("aux_loss").get<double>(), ref.loss.aux, kLossAbsTol) << s;
    EXPECT_LT(std::fabs(steps[s].at("grad_norm_before_clip").get<double>() -
                        ref.grad_norm_before_clip) / ref.grad_norm_before_clip,
              kGradNormRelTol) << s;
  }
  EXPECT_NEAR(j.at("loss_after_final_step").get<double>(), golden->loss_after_final_step.total,
              kLossAbsTol);
  CheckGradsFile(*golden, grads);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertdTrainTest, ::testing::ValuesIn(TrainFixtures()));

TEST(ExpertdTrainErrorsTest, ClearErrors) {
  const std::string bad_batch = TmpDir() + "/bad_batch.json";
  std::ofstream(bad_batch) << R"({"input_ids": [[1, 2, 3], [4, 5]]})";
  Output o = RunTrain("--model=" + FixtureDir("mixtral") + " --batch=" + bad_batch);
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("same length"), std::string::npos) << o.err;
  EXPECT_TRUE(o.out.empty());

  o = RunTrain("--model=" + FixtureDir("mixtral") + " --batch=" + TmpDir() + "/missing.json");
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("missing.json"), std::string::npos) << o.err;

  o = RunTrain("--model=" + FixtureDir("mixtral") + " --steps=nope");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--steps"), std::string::npos) << o.err;

  const std::string ok_batch = TmpDir() + "/ok_batch.json";
  std::ofstream(ok_batch) << R"({"input_ids": [[1, 2, 3]]})";
  o = RunTrain("--model=" + TmpDir() + "/no_model --batch=" + ok_batch);
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("no_model"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace expertd::golden
