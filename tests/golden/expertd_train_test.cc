// Runs the `expertd-train` binary itself (the contract in
// engine/train/tools/expertd_train.cc) on every trainable fixture and checks
// its JSON and --grads_out file against train_golden.json.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "models/dtype/dtype.h"
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

// The JSON's steps and final loss, and the --grads_out file, against the reference.
void ExpectMatchesGolden(const TrainGolden& golden, const nlohmann::json& j,
                         const std::string& grads) {
  const nlohmann::json& steps = j.at("steps");
  ASSERT_EQ(steps.size(), golden.steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    const GoldenStep& ref = golden.steps[s];
    ASSERT_EQ(steps[s].size(), 4u) << steps[s];
    EXPECT_NEAR(steps[s].at("loss_total").get<double>(), ref.loss.total, kLossAbsTol) << s;
    EXPECT_NEAR(steps[s].at("ce_loss").get<double>(), ref.loss.ce, kLossAbsTol) << s;
    EXPECT_NEAR(steps[s].at("aux_loss").get<double>(), ref.loss.aux, kLossAbsTol) << s;
    EXPECT_LT(
        std::fabs(steps[s].at("grad_norm_before_clip").get<double>() - ref.grad_norm_before_clip) /
            ref.grad_norm_before_clip,
        kGradNormRelTol)
        << s;
  }
  EXPECT_NEAR(j.at("loss_after_final_step").get<double>(), golden.loss_after_final_step.total,
              kLossAbsTol);
  CheckGradsFile(golden, grads);
}

std::string GoldenArgs(const std::string& arch, const TrainGolden& g, const std::string& grads) {
  return "--model=" + FixtureDir(arch) + " --batch=" + WriteBatch(g, arch) +
         " --steps=" + std::to_string(g.steps.size()) +
         " --lr=1e-3 --weight_decay=0.01 --clip_norm=1.0 --threads=2 --grads_out=" + grads;
}

class ExpertdTrainTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertdTrainTest, MatchesTheReference) {
  const std::string arch = GetParam();
  auto golden = LoadTrainGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::string grads = TmpDir() + "/" + arch + "_grads.safetensors";
  Output o = RunTrain(GoldenArgs(arch, *golden, grads));
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ASSERT_EQ(j.size(), 2u) << "exactly steps and loss_after_final_step: " << o.out;
  ExpectMatchesGolden(*golden, j, grads);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertdTrainTest, ::testing::ValuesIn(TrainFixtures()));

// --scope=lora: only the adapters get gradients; --lora_out writes the PEFT layout.
TEST(ExpertdTrainLoraTest, WritesThePeftAdapter) {
  auto golden = LoadTrainGolden("qwen3_moe");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::string grads = TmpDir() + "/lora_grads.safetensors", out = TmpDir() + "/lora_out";
  Output o =
      RunTrain("--model=" + FixtureDir("qwen3_moe") + " --batch=" + WriteBatch(*golden, "lora") +
               " --steps=3 --lr=1e-2 --scope=lora " +
               "--lora_rank=4 --lora_alpha=8 --grads_out=" + grads + " --lora_out=" + out);
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_LT(j.at("loss_after_final_step").get<double>(),
            j.at("steps")[0].at("loss_total").get<double>());
  auto file = models::SafetensorsFile::Open(grads);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_FALSE((*file)->tensors().empty());
  for (const models::SafetensorsEntry& e : (*file)->tensors()) {
    EXPECT_EQ(e.name.rfind("base_model.model.model.layers.", 0), 0u) << e.name;
  }
  auto adapter = models::SafetensorsFile::Open(out + "/adapter_model.safetensors");
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_NE(
      (*adapter)->Find("base_model.model.model.layers.2.mlp.experts.7.down_proj.lora_B.weight"),
      nullptr);
  std::ifstream config(out + "/adapter_config.json");
  EXPECT_TRUE(config.good());
}

// bf16 weights: trained on fp32 masters; every weight stays a bf16 value and
// the losses follow the fp32 reference closely.
TEST(ExpertdTrainBf16Test, TrainsBf16Weights) {
  auto golden = LoadTrainGolden("mixtral");
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::string weights = TmpDir() + "/bf16_trained.safetensors";
  Output o = RunTrain(
      "--model=" + FixtureDir("mixtral") + " --batch=" + WriteBatch(*golden, "bf16") +
      " --weights=model.bf16.safetensors" +
      " --steps=10 --lr=1e-3 --weight_decay=0.01 --clip_norm=1.0 --weights_out=" + weights);
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  for (size_t s = 0; s < golden->steps.size(); ++s) {  // bf16 rounding: ~1% of the loss
    const double ref = golden->steps[s].loss.total;
    EXPECT_NEAR(j.at("steps")[s].at("loss_total").get<double>(), ref, 0.02 * ref + 0.01) << s;
  }
  auto file = models::SafetensorsFile::Open(weights);
  ASSERT_TRUE(file.ok()) << file.status();
  int64_t not_bf16 = 0;
  for (const models::SafetensorsEntry& e : (*file)->tensors()) {
    std::vector<float> v(e.numel());
    std::memcpy(v.data(), (*file)->Data(e), e.nbytes());
    for (float x : v) not_bf16 += models::Bf16ToF32(models::F32ToBf16(x)) != x;
  }
  EXPECT_EQ(not_bf16, 0);
}

// --scope=pregate: distillation steps, held-out precision/recall against the
// speculative guess, and a checkpoint declaring its pre-gates.
TEST(ExpertdTrainPregateTest, TrainsAndWritesPregates) {
  std::mt19937 rng(7);
  auto write = [&](const std::string& name, int seqs) {
    nlohmann::json ids = nlohmann::json::array();
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> seq;
      for (int t = 0; t < 33; ++t) seq.push_back(static_cast<int32_t>(rng() % 512));
      ids.push_back(seq);
    }
    const std::string path = TmpDir() + "/" + name;
    std::ofstream(path) << nlohmann::json{{"input_ids", ids}}.dump();
    return path;
  };
  const std::string train = write("pregate_train.json", 96), held = write("pregate_held.json", 32);
  const std::string out = TmpDir() + "/pregate_model";
  Output o = RunTrain("--model=" + FixtureDir("mixtral") + " --scope=pregate --batch=" + train +
                      " --eval_batch=" + held + " --steps=200 --lr=1e-2 --weight_decay=0 " +
                      "--pregate_out=" + out);
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  EXPECT_EQ(j.at("pregate_steps").size(), 200u);
  EXPECT_GT(j.at("trained").at("precision").get<double>(),
            j.at("speculative").at("precision").get<double>())
      << o.out;
  std::ifstream config(out + "/config.json");
  std::string text((std::istreambuf_iterator<char>(config)), {});
  EXPECT_NE(text.find("\"expertd_pregate\": true"), std::string::npos) << text;
}

// --rows_per_step=N: step s trains on rows [s*N, s*N + N) of the batch, wrapping around.
TEST(ExpertdTrainRowsPerStepTest, StreamsTheRows) {
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> rows(5);
  for (auto& row : rows) {
    for (int t = 0; t < 9; ++t) row.push_back(static_cast<int32_t>(rng() % 512));
  }
  auto write = [&](const std::string& name, std::vector<int> pick) {
    nlohmann::json ids = nlohmann::json::array();
    for (int r : pick) ids.push_back(rows[r]);
    const std::string path = TmpDir() + "/" + name;
    std::ofstream(path) << nlohmann::json{{"input_ids", ids}}.dump();
    return path;
  };
  const std::string all = write("rows_all.json", {0, 1, 2, 3, 4});
  const std::string args = "--model=" + FixtureDir("mixtral") + " --lr=1e-2 --batch=";
  auto losses = [](const Output& o) {
    std::vector<double> out;
    const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
    if (j.is_discarded()) return out;
    for (const auto& step : j.at("steps")) out.push_back(step.at("loss_total").get<double>());
    out.push_back(j.at("loss_after_final_step").get<double>());
    return out;
  };
  // Every row per step is the plain run.
  Output plain = RunTrain(args + all + " --steps=2");
  Output every = RunTrain(args + all + " --steps=2 --rows_per_step=5");
  ASSERT_EQ(plain.status, 0) << plain.err;
  ASSERT_EQ(every.status, 0) << every.err;
  EXPECT_EQ(losses(plain), losses(every));
  // The first step trains on rows {0, 1} alone: its loss is a plain run's on those rows.
  Output streamed = RunTrain(args + all + " --steps=3 --rows_per_step=2");
  Output first = RunTrain(args + write("rows_01.json", {0, 1}) + " --steps=2");
  ASSERT_EQ(streamed.status, 0) << streamed.err;
  ASSERT_EQ(first.status, 0) << first.err;
  const std::vector<double> s = losses(streamed), f = losses(first);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0], f[0]);
  EXPECT_NE(s[1], f[1]);  // the second step moved on to rows {2, 3}
  // Wrapping: 3 rows at 2 per step read {0,1}, {2,0}, {1,2}: the same steps as the rows
  // written out twice without wrapping.
  const std::string stream3 = " --steps=3 --rows_per_step=2";
  Output wrapped = RunTrain(args + write("rows_012.json", {0, 1, 2}) + stream3);
  Output unrolled = RunTrain(args + write("rows_012012.json", {0, 1, 2, 0, 1, 2}) + stream3);
  ASSERT_EQ(wrapped.status, 0) << wrapped.err;
  ASSERT_EQ(unrolled.status, 0) << unrolled.err;
  EXPECT_EQ(losses(wrapped), losses(unrolled));
  EXPECT_NE(losses(wrapped), losses(RunTrain(args + write("rows_012b.json", {0, 1, 2}) +
                                             " --steps=3")));
}

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

  const std::string one_seq = TmpDir() + "/one_seq.json";
  std::ofstream(one_seq) << R"({"input_ids": [[1, 2, 3]]})";
  o = RunTrain("--model=" + FixtureDir("mixtral") + " --batch=" + one_seq + " --lora_out=x");
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("--scope=lora"), std::string::npos) << o.err;

  o = RunTrain("--model=" + FixtureDir("mixtral") + " --steps=nope");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--steps"), std::string::npos) << o.err;

  const std::string ok_batch = TmpDir() + "/ok_batch.json";
  std::ofstream(ok_batch) << R"({"input_ids": [[1, 2, 3]]})";
  o = RunTrain("--model=" + TmpDir() + "/no_model --batch=" + ok_batch);
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("no_model"), std::string::npos) << o.err;
}


// What a fixture's parameters hold while training (fp32 weight, gradient and
// two AdamW moments: 16 bytes an element): the routed experts' of the largest
// layer, and everything that is not a routed expert.
struct FixtureBytes {
  int64_t layer_experts = 0, non_expert = 0, all = 0;
};

FixtureBytes MeasureFixture(const std::string& arch) {
  FixtureBytes b;
  auto file = models::SafetensorsFile::Open(FixtureDir(arch) + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return b;
  std::map<std::string, int64_t> per_layer;
  for (const models::SafetensorsEntry& e : (*file)->tensors()) {
    const int64_t bytes = e.numel() * 16;
    b.all += bytes;
    if (e.name.find(".experts.") == std::string::npos) {
      b.non_expert += bytes;
      continue;
    }
    const size_t layer = e.name.find("layers.");  // model.layers.L.<block>.experts...
    per_layer[e.name.substr(0, e.name.find('.', layer + 7))] += bytes;
  }
  for (const auto& [layer, bytes] : per_layer) b.layer_experts = std::max(b.layer_experts, bytes);
  return b;
}

struct ScheduleCase {
  std::string arch;
  bool offload;
  int chunks, micro_batches;
};

std::string CaseName(const ::testing::TestParamInfo<ScheduleCase>& info) {
  const ScheduleCase& c = info.param;
  return c.arch + (c.offload ? "_offload" : "_resident") + "_chunks" +
         std::to_string(c.chunks) + "_mb" + std::to_string(c.micro_batches);
}

// Every combination of the flags on one fixture, two on each of the others.
std::vector<ScheduleCase> ScheduleCases() {
  std::vector<ScheduleCase> cases;
  for (bool offload : {false, true}) {
    for (int chunks : {1, 2, 0}) {
      for (int mb : {1, 2, 0}) cases.push_back({"qwen3_moe", offload, chunks, mb});
    }
  }
  for (const std::string& arch : TrainFixtures()) {
    if (arch == "qwen3_moe") continue;
    cases.push_back({arch, true, 0, 2});
    cases.push_back({arch, true, 2, 0});
  }
  return cases;
}

// The memory schedules compute the same function: the reference holds
// through expertd-train with each combination of --offload_experts,
// --moe_chunks and --micro_batches. With offload the device leaves the
// experts 3/4 of what one layer's experts need with their gradients and
// AdamW state; resident, it holds everything.
class ExpertdTrainScheduleTest : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(ExpertdTrainScheduleTest, MatchesTheReference) {
  const ScheduleCase& c = GetParam();
  auto golden = LoadTrainGolden(c.arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const FixtureBytes bytes = MeasureFixture(c.arch);
  ASSERT_GT(bytes.layer_experts, 0);
  const int64_t device = c.offload ? bytes.non_expert + bytes.layer_experts * 3 / 4
                                   : bytes.all + (2 << 20);
  const std::string grads = TmpDir() + "/" + CaseName({c, 0}) + "_grads.safetensors";
  Output o = RunTrain(GoldenArgs(c.arch, *golden, grads) +
                      (c.offload ? " --offload_experts" : "") +
                      " --moe_chunks=" + std::to_string(c.chunks) +
                      " --micro_batches=" + std::to_string(c.micro_batches) +
                      " --device_memory_bytes=" + std::to_string(device));
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ExpectMatchesGolden(*golden, j, grads);
  const nlohmann::json& report = j.at("schedule").back();
  EXPECT_EQ(report.at("expert_placement"), c.offload ? "host" : "resident") << report;
  EXPECT_LE(report.at("peak_device_bytes").get<int64_t>(), device) << report;
  EXPECT_EQ(report.at("uploaded_bytes").get<int64_t>() > 0, c.offload) << report;
  if (c.chunks > 1 || c.micro_batches > 1) {  // restored by recomputation or from the host
    EXPECT_GT(report.at("recomputed_flops").get<int64_t>() +
                  report.at("offloaded_activation_bytes").get<int64_t>(),
              0)
        << report;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, ExpertdTrainScheduleTest, ::testing::ValuesIn(ScheduleCases()),
                         CaseName);

// Expert offload alone keeps the summation order: bitwise the weights of plain
// training. Plain training on the same small device fails, naming what did not
// fit; the trace shows uploads, expert compute and per-parameter AdamW steps.
TEST(ExpertdTrainScheduleTest, OffloadIsBitwisePlainAndPlainDoesNotFit) {
  const std::string arch = "mixtral";
  auto golden = LoadTrainGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const FixtureBytes bytes = MeasureFixture(arch);
  const std::string device =
      std::to_string(bytes.non_expert + bytes.layer_experts * 3 / 4);
  const std::string plain_w = TmpDir() + "/plain_w.safetensors",
                    off_w = TmpDir() + "/off_w.safetensors", trace = TmpDir() + "/trace.json";
  const std::string args = "--model=" + FixtureDir(arch) + " --batch=" +
                           WriteBatch(*golden, "bitwise") + " --steps=3 --threads=2";
  Output plain = RunTrain(args + " --weights_out=" + plain_w);
  ASSERT_EQ(plain.status, 0) << plain.err;
  Output off = RunTrain(args + " --offload_experts --device_memory_bytes=" + device +
                        " --trace_out=" + trace + " --weights_out=" + off_w);
  ASSERT_EQ(off.status, 0) << off.err;
  std::ifstream a(plain_w, std::ios::binary), b(off_w, std::ios::binary);
  const std::string wa((std::istreambuf_iterator<char>(a)), {}),
      wb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_FALSE(wa.empty());
  EXPECT_TRUE(wa == wb) << "offloaded training changed the weights' bits";

  Output small = RunTrain(args + " --device_memory_bytes=" + device);
  EXPECT_EQ(small.status, 1);
  EXPECT_NE(small.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << small.err;
  EXPECT_NE(small.err.find("--offload_experts"), std::string::npos) << small.err;

  std::ifstream t(trace);
  const nlohmann::json tj = nlohmann::json::parse(t, nullptr, false);
  ASSERT_FALSE(tj.is_discarded());
  std::set<int> lanes;
  for (const nlohmann::json& e : tj.at("traceEvents")) {
    if (e.at("ph") == "X") lanes.insert(e.at("tid").get<int>());
  }
  EXPECT_EQ(lanes, (std::set<int>{1, 2, 5, 6})) << "compute, upload, optimizer and step lanes";
}


std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// An offloaded expert's AdamW update starts as soon as its gradient is final,
// overlapping the rest of backward, and the weights are still bitwise those of
// plain training: without clipping; with clipping that does not bind (the
// provisional updates stand); with clipping that binds (step 0's provisional
// updates are undone and redone clipped, later steps defer them).
TEST(ExpertdTrainScheduleTest, ExpertUpdatesOverlapBackwardAndClippingHolds) {
  const std::string arch = "mixtral";
  auto golden = LoadTrainGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const FixtureBytes bytes = MeasureFixture(arch);
  const std::string device = std::to_string(bytes.non_expert + bytes.layer_experts * 3 / 4);
  const std::string batch = WriteBatch(*golden, "early");
  for (const std::string clip : {"0", "1e6", "0.01"}) {
    SCOPED_TRACE("clip_norm " + clip);
    const std::string plain_w = TmpDir() + "/plain_early.safetensors",
                      off_w = TmpDir() + "/off_early.safetensors";
    const std::string args = "--model=" + FixtureDir(arch) + " --batch=" + batch +
                             " --steps=3 --threads=2 --clip_norm=" + clip;
    Output plain = RunTrain(args + " --weights_out=" + plain_w);
    ASSERT_EQ(plain.status, 0) << plain.err;
    Output off = RunTrain(args + " --offload_experts --device_memory_bytes=" + device +
                          " --weights_out=" + off_w);
    ASSERT_EQ(off.status, 0) << off.err;
    const std::string wa = ReadFile(plain_w), wb = ReadFile(off_w);
    std::remove(plain_w.c_str());
    std::remove(off_w.c_str());
    EXPECT_FALSE(wa.empty());
    EXPECT_TRUE(wa == wb) << "early expert updates changed the weights' bits";
    const nlohmann::json j = nlohmann::json::parse(off.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << off.out;
    const nlohmann::json& steps = j.at("schedule");
    ASSERT_EQ(steps.size(), 3u);
    for (size_t s = 0; s < steps.size(); ++s) {
      const int64_t early = steps[s].at("early_expert_updates"),
                    redone = steps[s].at("redone_expert_updates");
      if (clip == "0.01") {  // binds every step: only step 0 tries
        EXPECT_EQ(early, 0) << "step " << s;
        EXPECT_EQ(redone > 0, s == 0) << "step " << s;
      } else {
        EXPECT_GT(early, 0) << "step " << s;
        EXPECT_EQ(redone, 0) << "step " << s;
      }
    }
  }
  // One step's timeline with clipping on (not binding): some expert's update
  // is handed to the optimizer thread before the step's last backward expert
  // compute starts. (When that thread then runs is the OS's choice: on a
  // loaded machine it may only run after backward, so the hand-off, recorded
  // on backward's own thread, is what is checked.)
  const std::string trace = TmpDir() + "/trace_early.json";
  Output one = RunTrain("--model=" + FixtureDir(arch) + " --batch=" + batch +
                        " --steps=1 --threads=2 --clip_norm=1e6 --offload_experts" +
                        " --device_memory_bytes=" + device + " --trace_out=" + trace);
  ASSERT_EQ(one.status, 0) << one.err;
  const nlohmann::json tj = nlohmann::json::parse(ReadFile(trace), nullptr, false);
  std::remove(trace.c_str());
  ASSERT_FALSE(tj.is_discarded());
  int64_t first_hand_off = -1, expert_updates = 0, last_backward = -1;
  for (const nlohmann::json& e : tj.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const std::string name = e.at("name");
    const int64_t ts = e.at("ts");
    if (name.find(".experts.") != std::string::npos) {
      if (name.rfind("queue AdamW ", 0) == 0) {
        first_hand_off = first_hand_off < 0 ? ts : std::min(first_hand_off, ts);
      } else if (name.rfind("AdamW ", 0) == 0) {
        ++expert_updates;
      }
    }
    if (name.rfind("backward expert", 0) == 0) last_backward = std::max(last_backward, ts);
  }
  ASSERT_GE(first_hand_off, 0);
  EXPECT_GT(expert_updates, 0);
  EXPECT_LT(first_hand_off, last_backward);
}


// An empty directory for the SSD tier's file; the destructor checks the run
// removed its file, then removes the directory (a stress run once filled the
// disk with leftovers).
class SsdDir {
 public:
  explicit SsdDir(const std::string& name) : path_(TmpDir() + "/ssd_" + name) {
    mkdir(path_.c_str(), 0700);
  }
  ~SsdDir() {
    EXPECT_EQ(rmdir(path_.c_str()), 0) << path_ << " is not empty: the SSD tier left its file";
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The device as in the schedule cases, and a host budget below one layer's
// experts (half of them, with gradients and AdamW state): most experts live
// in the SSD tier at any time.
std::string SsdFlags(const FixtureBytes& bytes, const std::string& dir) {
  return " --offload_experts --device_memory_bytes=" +
         std::to_string(bytes.non_expert + bytes.layer_experts * 3 / 4) +
         " --host_memory_bytes=" + std::to_string(bytes.layer_experts / 2 + (64 << 10)) +
         " --ssd_dir=" + dir;
}

void ExpectSsdReport(const nlohmann::json& report) {
  EXPECT_EQ(report.at("expert_placement"), "host+ssd") << report;
  const std::string why = report.at("placement_reason");
  EXPECT_NE(why.find("exceeds --host_memory_bytes="), std::string::npos) << why;
  EXPECT_NE(why.find("in the SSD tier"), std::string::npos) << why;
  EXPECT_GT(report.at("ssd_read_bytes").get<int64_t>(), 0) << report;
  EXPECT_GT(report.at("ssd_written_bytes").get<int64_t>(), 0) << report;
  // The tier's sequence, revised as each layer's routing became known, was
  // exactly the step's expert uses.
  EXPECT_EQ(report.at("ssd_skipped_uses").get<int64_t>(), 0) << report;
  EXPECT_EQ(report.at("ssd_unplanned_pins").get<int64_t>(), 0) << report;
  // Nothing read the whole model during the step: the host kept to its budget.
  EXPECT_LE(report.at("ssd_host_peak_experts").get<int64_t>(),
            report.at("ssd_host_capacity_experts").get<int64_t>())
      << report;
}

// Past --host_memory_bytes the experts' weights, gradients and AdamW state
// live in the SSD tier: still bitwise the weights of plain training, with and
// without clipping, fp32 and bf16; a missing --ssd_dir is a clear error.
TEST(ExpertdTrainScheduleTest, SsdTierIsBitwisePlain) {
  const std::string arch = "mixtral";
  auto golden = LoadTrainGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const FixtureBytes bytes = MeasureFixture(arch);
  for (const std::string clip : {"1.0", "0"}) {
    SCOPED_TRACE("clip_norm " + clip);
    const std::string plain_w = TmpDir() + "/plain_ssd.safetensors",
                      ssd_w = TmpDir() + "/ssd.safetensors";
    const std::string args = "--model=" + FixtureDir(arch) + " --batch=" +
                             WriteBatch(*golden, "ssd") + " --steps=3 --threads=2 --clip_norm=" +
                             clip;
    Output plain = RunTrain(args + " --weights_out=" + plain_w);
    ASSERT_EQ(plain.status, 0) << plain.err;
    {
      SsdDir dir("bitwise");
      Output ssd = RunTrain(args + SsdFlags(bytes, dir.path()) + " --weights_out=" + ssd_w);
      ASSERT_EQ(ssd.status, 0) << ssd.err;
      const nlohmann::json j = nlohmann::json::parse(ssd.out, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << ssd.out;
      ExpectSsdReport(j.at("schedule").back());
      for (const nlohmann::json& step : j.at("schedule")) {  // early only without clipping
        EXPECT_EQ(step.at("early_expert_updates").get<int64_t>() > 0, clip == "0") << step;
      }
    }
    const std::string wa = ReadFile(plain_w), wb = ReadFile(ssd_w);
    EXPECT_FALSE(wa.empty());
    EXPECT_TRUE(wa == wb) << "the SSD tier changed the weights' bits";
    std::remove(plain_w.c_str());
    std::remove(ssd_w.c_str());
  }
  {  // bf16 weights: the fp32 masters travel in the records' state sections
    SCOPED_TRACE("bf16");
    const std::string plain_w = TmpDir() + "/plain_bf16.safetensors",
                      ssd_w = TmpDir() + "/ssd_bf16.safetensors";
    const std::string args = "--model=" + FixtureDir(arch) +
                             " --weights=model.bf16.safetensors --batch=" +
                             WriteBatch(*golden, "ssd") + " --steps=3 --threads=2";
    Output plain = RunTrain(args + " --weights_out=" + plain_w);
    ASSERT_EQ(plain.status, 0) << plain.err;
    SsdDir dir("bf16");
    const std::string device =  // the non-expert masters need a quarter more
        std::to_string(bytes.non_expert * 5 / 4 + bytes.layer_experts * 3 / 4);
    Output ssd = RunTrain(args + " --offload_experts --device_memory_bytes=" + device +
                          " --host_memory_bytes=" + std::to_string(bytes.layer_experts / 2) +
                          " --ssd_dir=" + dir.path() + " --weights_out=" + ssd_w);
    ASSERT_EQ(ssd.status, 0) << ssd.err;
    const nlohmann::json j = nlohmann::json::parse(ssd.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << ssd.out;
    ExpectSsdReport(j.at("schedule").back());
    const std::string wa = ReadFile(plain_w), wb = ReadFile(ssd_w);
    EXPECT_FALSE(wa.empty());
    EXPECT_TRUE(wa == wb) << "the SSD tier changed the bf16 training's bits";
    std::remove(plain_w.c_str());
    std::remove(ssd_w.c_str());
  }
  Output no_dir = RunTrain("--model=" + FixtureDir(arch) + " --batch=" +
                           WriteBatch(*golden, "ssd") + SsdFlags(bytes, ""));
  EXPECT_EQ(no_dir.status, 1);
  EXPECT_NE(no_dir.err.find("--ssd_dir"), std::string::npos) << no_dir.err;
}

// The goldens (gradients, 10 AdamW steps) hold with the SSD tier under every
// fixture, combined with the other schedules.
struct SsdCase {
  std::string arch;
  int chunks, micro_batches;
};

std::vector<SsdCase> SsdCases() {
  std::vector<SsdCase> cases;
  for (const std::string& arch : TrainFixtures()) cases.push_back({arch, 1, 1});
  cases.push_back({"mixtral", 0, 2});
  cases.push_back({"qwen3_moe", 2, 0});
  return cases;
}

class ExpertdTrainSsdTest : public ::testing::TestWithParam<SsdCase> {};

TEST_P(ExpertdTrainSsdTest, MatchesTheReference) {
  const SsdCase& c = GetParam();
  auto golden = LoadTrainGolden(c.arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const FixtureBytes bytes = MeasureFixture(c.arch);
  const std::string name = c.arch + "_c" + std::to_string(c.chunks) + "_mb" +
                           std::to_string(c.micro_batches);
  const std::string grads = TmpDir() + "/" + name + "_ssd_grads.safetensors";
  SsdDir dir(name);
  Output o = RunTrain(GoldenArgs(c.arch, *golden, grads) + SsdFlags(bytes, dir.path()) +
                      " --moe_chunks=" + std::to_string(c.chunks) +
                      " --micro_batches=" + std::to_string(c.micro_batches));
  ASSERT_EQ(o.status, 0) << o.err;
  const nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << o.out;
  ExpectMatchesGolden(*golden, j, grads);
  ExpectSsdReport(j.at("schedule").back());
  std::remove(grads.c_str());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertdTrainSsdTest, ::testing::ValuesIn(SsdCases()),
                         [](const ::testing::TestParamInfo<SsdCase>& info) {
                           return info.param.arch + "_chunks" +
                                  std::to_string(info.param.chunks) + "_mb" +
                                  std::to_string(info.param.micro_batches);
                         });

}  // namespace
}  // namespace expertd::golden
