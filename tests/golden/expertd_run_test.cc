// Runs the `expertd-run` binary itself (the contract in
// engine/tools/expertd_run.cc) and checks its JSON against the fixtures.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/golden/golden_data.h"

namespace expertd::golden {
namespace {

struct Output {
  int status = -1;
  std::string out;
};

// Runs the binary with `args`, capturing stdout (stderr to a file we read back).
Output RunTool(const std::string& args, std::string* err) {
  const std::string err_file =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/stderr.txt";
  const std::string cmd = "engine/tools/expertd-run " + args + " 2>" + err_file;
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) o.out.append(buf, n);
  const int raw = pclose(p);
  o.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  if (err != nullptr) {
    err->clear();
    if (FILE* f = fopen(err_file.c_str(), "r")) {
      while ((n = fread(buf, 1, sizeof(buf), f)) > 0) err->append(buf, n);
      fclose(f);
    }
  }
  return o;
}

void CheckAgainstGolden(const std::string& arch, size_t case_index, const std::string& extra = "") {
  auto golden = LoadGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const GoldenCase& c = golden->cases.at(case_index);
  std::string err;
  Output o =
      RunTool("--model=" + FixtureDir(arch) + " --tokens=" + absl::StrJoin(c.input_ids, ",") +
                  " --generate=16 --threads=2" + extra,
              &err);
  ASSERT_EQ(o.status, 0) << err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ASSERT_EQ(j.size(), 3u) << "exactly last_logits, routing, generated";
  EXPECT_LT(RelError(j.at("last_logits").get<std::vector<float>>(), c.logits_last), 1e-4);
  EXPECT_EQ(j.at("generated").get<std::vector<int32_t>>(), c.greedy);
  const nlohmann::json& routing = j.at("routing");
  std::vector<bool> moe(routing.size(), false);
  for (const LayerChoice& lc : c.router) {
    ASSERT_LT(static_cast<size_t>(lc.layer), routing.size());
    moe[lc.layer] = true;
    EXPECT_EQ(routing[lc.layer].get<std::vector<std::vector<int32_t>>>(), lc.topk_ids)
        << "layer " << lc.layer;
  }
  for (size_t l = 0; l < routing.size(); ++l) {
    if (!moe[l]) EXPECT_TRUE(routing[l].empty()) << "dense layer " << l << " must be []";
  }
}

TEST(ExpertdRunTest, MixtralJsonMatchesTransformers) { CheckAgainstGolden("mixtral", 1); }

TEST(ExpertdRunTest, DenseLayerGetsAnEmptyRoutingEntry) {
  CheckAgainstGolden("qwen2_moe_mixed", 1);
}

TEST(ExpertdRunTest, SeveralVirtualDevices) {
  CheckAgainstGolden("mixtral", 2, " --devices=2");
  CheckAgainstGolden("qwen2_moe", 2, " --devices=3 --moe_parallel=shard");
  CheckAgainstGolden("olmoe", 2, " --devices=4 --moe_parallel=expert");
}

// MLA over the compressed KV cache, sigmoid grouped routing, a dense first layer.
TEST(ExpertdRunTest, DeepseekV3JsonMatchesTheReference) {
  for (size_t i = 0; i < 3; ++i) CheckAgainstGolden("deepseek_v3", i);
}

TEST(ExpertdRunTest, Bf16WeightsFlag) {
  auto golden = LoadGolden("olmoe");
  ASSERT_TRUE(golden.ok());
  const GoldenCase& c = golden->bf16_cases.at(1);
  // 1e-5 of the bf16 file's own reference; the fp32 reference is much further
  // away, so output computed from the default (fp32) weights fails.
  ASSERT_GT(RelError(golden->cases.at(1).logits_last, c.logits_last), 1e-4);
  std::string err;
  Output o =
      RunTool("--model=" + FixtureDir("olmoe") + " --tokens=" + absl::StrJoin(c.input_ids, ",") +
                  " --generate=16 --weights=model.bf16.safetensors",
              &err);
  ASSERT_EQ(o.status, 0) << err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_LT(RelError(j.at("last_logits").get<std::vector<float>>(), c.logits_last), 1e-5);
  EXPECT_EQ(j.at("generated").get<std::vector<int32_t>>(), c.greedy);
}

TEST(ExpertdRunTest, ErrorsGoToStderrWithNonZeroExit) {
  std::string err;
  for (const std::string& args : {std::string("--model=/no/such/dir --tokens=1"),
                                  "--model=" + FixtureDir("mixtral") + " --tokens=1,x",
                                  "--model=" + FixtureDir("mixtral") + " --tokens=100000",
                                  "--model=" + FixtureDir("mixtral") + " --tokens=1 --backend=tpu",
                                  std::string("--tokens=1 --bogus_flag")}) {
    Output o = RunTool(args, &err);
    EXPECT_NE(o.status, 0) << args;
    EXPECT_TRUE(o.out.empty()) << args << ": " << o.out;
    EXPECT_NE(err.find("expertd-run: "), std::string::npos) << args << ": " << err;
  }
}

}  // namespace
}  // namespace expertd::golden
