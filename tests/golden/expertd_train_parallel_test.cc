// expertd-train's parallel schedules against train_golden.json:
// - --train_devices=N: each MoE layer's routed experts run over N CPU virtual
//   devices (one thread each, combined through the in-process collectives),
//   placed per step by Graham's greedy with the previous step's hottest
//   quarter pinned; the weights are bitwise those of one device (with
//   --moe_chunks too, and with --offload_experts on devices smaller than a
//   layer's experts).
// - --micro_batches=N with --activation_restore=recompute|offload: MPMoE's
//   pipelined micro-batches; both strategies give bitwise the same weights.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>

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

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

struct Output {
  int status = -1;
  std::string out, err;
};

Output RunTrain(const std::string& args) {
  const std::string err_file = TmpDir() + "/devices_stderr.txt";
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
  std::remove(err_file.c_str());
  return o;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The gradients of --grads_out against the reference's.
void ExpectGradsMatch(const TrainGolden& g, const std::string& path) {
  auto file = models::SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), g.grads.size());
  for (const models::SafetensorsEntry& e : (*file)->tensors()) {
    auto it = g.grads.find(e.name);
    ASSERT_NE(it, g.grads.end()) << e.name;
    ASSERT_EQ(e.dtype, models::DType::kF32) << e.name;
    std::vector<float> ours(e.numel());
    std::memcpy(ours.data(), (*file)->Data(e), e.nbytes());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(ours[i]) - it->second.values[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(it->second.values[i])));
    }
    EXPECT_LT(scale == 0 ? diff : diff / scale, kGradRelTol) << e.name;
  }
}

// The common flags of a golden run; its batch is written under `prefix`.
std::string GoldenArgs(const std::string& arch, const TrainGolden& g, const std::string& prefix) {
  const std::string batch = prefix + "_batch.json";
  std::ofstream(batch) << nlohmann::json{{"input_ids", g.input_ids}}.dump();
  return "--model=" + FixtureDir(arch) + " --batch=" + batch +
         " --steps=" + std::to_string(g.steps.size()) +
         " --lr=1e-3 --weight_decay=0.01 --clip_norm=1.0 --threads=2";
}

// Runs expertd-train with `args` and --grads_out; checks the losses and the
// first step's gradients against the reference; returns the output JSON.
nlohmann::json RunAndCheckGolden(const TrainGolden& g, const std::string& args,
                                 const std::string& prefix) {
  const std::string grads = prefix + "_grads.safetensors";
  Output o = RunTrain(args + " --grads_out=" + grads);
  EXPECT_EQ(o.status, 0) << o.err;
  nlohmann::json j = nlohmann::json::parse(o.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << o.out;
  if (o.status != 0 || j.is_discarded()) return nlohmann::json::object({{"steps", {}}});
  const nlohmann::json& steps = j.at("steps");
  EXPECT_EQ(steps.size(), g.steps.size());
  for (size_t s = 0; s < steps.size() && s < g.steps.size(); ++s) {
    EXPECT_NEAR(steps[s].at("loss_total").get<double>(), g.steps[s].loss.total, kLossAbsTol) << s;
  }
  EXPECT_NEAR(j.at("loss_after_final_step").get<double>(), g.loss_after_final_step.total,
              kLossAbsTol);
  ExpectGradsMatch(g, grads);
  std::remove(grads.c_str());
  std::remove((prefix + "_batch.json").c_str());
  return j;
}

class ExpertdTrainDevicesTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertdTrainDevicesTest, MatchesTheReferenceAndOneDeviceBitwise) {
  const std::string arch = GetParam();
  auto golden = LoadTrainGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const std::string dir = TmpDir() + "/devices_" + arch;
  const std::string one = dir + "_one.safetensors", three = dir + "_three.safetensors";
  const std::string args = GoldenArgs(arch, *golden, dir);
  Output plain = RunTrain(args + " --weights_out=" + one);
  ASSERT_EQ(plain.status, 0) << plain.err;
  nlohmann::json j;
  ASSERT_NO_FATAL_FAILURE(
      j = RunAndCheckGolden(*golden, args + " --train_devices=3 --weights_out=" + three, dir));
  const nlohmann::json& steps = j.at("steps");
  const std::string w1 = ReadFile(one), w3 = ReadFile(three);
  EXPECT_FALSE(w1.empty());
  EXPECT_TRUE(w1 == w3) << "three devices changed the weights' bits";

  // Every step reports each MoE layer's placement; from the second step on
  // the previous step's hottest experts are pinned.
  const nlohmann::json& schedule = j.at("schedule");
  ASSERT_EQ(schedule.size(), steps.size());
  for (size_t s = 0; s < schedule.size(); ++s) {
    const nlohmann::json& r = schedule[s];
    ASSERT_TRUE(r.contains("device_imbalance")) << r;
    EXPECT_EQ(r.at("device_imbalance").size(), r.at("moe_chunks").size()) << r;
    for (const nlohmann::json& v : r.at("device_imbalance")) {
      EXPECT_GE(v.get<double>(), 1.0) << r;
      EXPECT_LE(v.get<double>(), 3.0) << r;  // max / mean of 3 devices
    }
    int pinned = 0;
    for (const nlohmann::json& v : r.at("pinned_experts")) pinned += v.get<int>();
    if (s > 0) EXPECT_GT(pinned, 0) << r;
  }
  for (const std::string& f : {one, three}) std::remove(f.c_str());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertdTrainDevicesTest, ::testing::ValuesIn(TrainFixtures()));

// MemFine's chunks on every device: the reference holds and the weights are
// the single-device chunked run's, bitwise.
TEST(ExpertdTrainDevicesTest, ChunksOnEveryDeviceAreBitwiseOneDevice) {
  for (const std::string arch : {"mixtral", "qwen3_moe"}) {
    auto golden = LoadTrainGolden(arch);
    ASSERT_TRUE(golden.ok()) << golden.status();
    const std::string prefix = TmpDir() + "/devices_chunks_" + arch;
    const std::string one = prefix + "_one.safetensors", three = prefix + "_three.safetensors";
    Output plain =
        RunTrain(GoldenArgs(arch, *golden, prefix) + " --moe_chunks=2 --weights_out=" + one);
    ASSERT_EQ(plain.status, 0) << plain.err;
    nlohmann::json j;
    ASSERT_NO_FATAL_FAILURE(j = RunAndCheckGolden(*golden,
                                                  GoldenArgs(arch, *golden, prefix) +
                                                      " --moe_chunks=2 --train_devices=3"
                                                      " --weights_out=" +
                                                      three,
                                                  prefix));
    for (const nlohmann::json& r : j.at("schedule")) {
      EXPECT_GT(r.at("recomputed_flops").get<int64_t>(), 0) << r;
      for (const nlohmann::json& c : r.at("moe_chunks")) EXPECT_EQ(c.get<int>(), 2) << r;
    }
    const std::string a = ReadFile(one), b = ReadFile(three);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << arch << ": three devices changed the chunked run's bits";
    for (const std::string& f : {one, three}) std::remove(f.c_str());
  }
}

// What a fixture holds while training (fp32: weight, gradient, two moments:
// 16 bytes an element): the routed experts of its largest layer, the rest.
struct FixtureBytes {
  int64_t layer_experts = 0, non_expert = 0;
};

FixtureBytes MeasureFixture(const std::string& arch) {
  FixtureBytes b;
  auto file = models::SafetensorsFile::Open(FixtureDir(arch) + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return b;
  std::map<std::string, int64_t> per_layer;
  for (const models::SafetensorsEntry& e : (*file)->tensors()) {
    const int64_t bytes = e.numel() * 16;
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

// Offloaded experts over 2 and 3 devices, each device (--device_memory_bytes)
// smaller than the non-expert state plus one layer's experts: with clipping
// (--clip_norm=1.0) the reference holds, and with and without clipping the
// weights are bitwise plain training's. Each device stays within its memory,
// keeps pinned experts between steps, and moves what the placement modelled.
class ExpertdTrainDevicesOffloadTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertdTrainDevicesOffloadTest, IsBitwisePlainWithinEachDevice) {
  const std::string arch = GetParam();
  auto golden = LoadTrainGolden(arch);
  ASSERT_TRUE(golden.ok()) << golden.status();
  const FixtureBytes bytes = MeasureFixture(arch);
  ASSERT_GT(bytes.layer_experts, 0);
  const int64_t device = bytes.non_expert + bytes.layer_experts * 3 / 4;
  const std::string prefix = TmpDir() + "/devices_offload_" + arch;
  for (const std::string clip : {"1.0", "0"}) {
    SCOPED_TRACE("clip_norm " + clip);
    // GoldenArgs' flags with this clip norm.
    std::string args = GoldenArgs(arch, *golden, prefix);
    args.replace(args.find("--clip_norm=1.0"), 15, "--clip_norm=" + clip);
    const std::string plain_w = prefix + "_plain.safetensors";
    Output plain = RunTrain(args + " --weights_out=" + plain_w);
    ASSERT_EQ(plain.status, 0) << plain.err;
    for (int devices : {2, 3}) {
      SCOPED_TRACE(std::to_string(devices) + " devices");
      const std::string w = prefix + "_devices.safetensors";
      const std::string flags = args + " --train_devices=" + std::to_string(devices) +
                                " --offload_experts --device_memory_bytes=" +
                                std::to_string(device) + " --weights_out=" + w;
      nlohmann::json j;
      if (clip == "1.0") {
        ASSERT_NO_FATAL_FAILURE(j = RunAndCheckGolden(*golden, flags, prefix));
        args = GoldenArgs(arch, *golden, prefix);  // it removed the batch file
      } else {
        Output o = RunTrain(flags);
        ASSERT_EQ(o.status, 0) << o.err;
        j = nlohmann::json::parse(o.out, nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << o.out;
      }
      EXPECT_TRUE(ReadFile(plain_w) == ReadFile(w)) << "offloaded devices changed the bits";
      std::remove(w.c_str());
      const nlohmann::json& schedule = j.at("schedule");
      ASSERT_EQ(schedule.size(), golden->steps.size());
      for (size_t s = 0; s < schedule.size(); ++s) {
        const nlohmann::json& r = schedule[s];
        SCOPED_TRACE("step " + std::to_string(s));
        EXPECT_EQ(r.at("expert_placement"), "host") << r;
        EXPECT_LE(r.at("peak_device_bytes").get<int64_t>(), device) << r;
        ASSERT_EQ(r.at("device_peak_bytes").size(), static_cast<size_t>(devices)) << r;
        int cached = 0;
        for (int d = 0; d < devices; ++d) {
          EXPECT_LE(r.at("device_peak_bytes")[d].get<int64_t>(), device) << r;
          cached += r.at("device_cached_experts")[d].get<int>();
        }
        EXPECT_GT(cached, 0) << r;
        const int64_t modelled = r.at("placed_upload_bytes");
        EXPECT_GT(modelled, 0) << r;
        EXPECT_EQ(r.at("measured_placed_upload_bytes").get<int64_t>(), modelled) << r;
        EXPECT_EQ(r.at("uploaded_bytes").get<int64_t>(), modelled) << r;
        EXPECT_GT(r.at("placed_upload_seconds").get<double>(), 0) << r;
        EXPECT_GT(r.at("measured_placed_upload_seconds").get<double>(), 0) << r;
        int pinned = 0;
        for (const nlohmann::json& v : r.at("pinned_experts")) pinned += v.get<int>();
        if (s > 0) EXPECT_GT(pinned, 0) << r;
        // Without clipping the experts' updates overlap backward, started
        // from the device threads' done callbacks.
        if (clip == "0") EXPECT_GT(r.at("early_expert_updates").get<int64_t>(), 0) << r;
      }
    }
    std::remove(plain_w.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertdTrainDevicesOffloadTest,
                         ::testing::Values("qwen3_moe", "mixtral", "deepseek_v3"));

TEST(ExpertdTrainDevicesErrorsTest, ClearErrors) {
  const std::string batch = TmpDir() + "/devices_errors_batch.json";
  std::ofstream(batch) << R"({"input_ids": [[1, 2, 3], [4, 5, 6]]})";
  const std::string args = "--model=" + FixtureDir("mixtral") + " --batch=" + batch;
  Output o = RunTrain(args + " --train_devices=2 --offload_experts --host_memory_bytes=1000000" +
                      " --ssd_dir=" + TmpDir());
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("--train_devices"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("SSD tier"), std::string::npos) << o.err;
  o = RunTrain(args + " --train_devices=2 --micro_batches=2");
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("--micro_batches"), std::string::npos) << o.err;
  o = RunTrain(args + " --train_devices=0");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--train_devices"), std::string::npos) << o.err;
  EXPECT_TRUE(o.out.empty());
  std::remove(batch.c_str());
}

// MPMoE through expertd-train: each restore strategy holds the reference, the
// two give bitwise the same weights, and the output counts what each did.
TEST(ExpertdTrainMicroBatchTest, RestoreStrategiesMatchTheReferenceAndEachOther) {
  for (const std::string arch : {"mixtral", "qwen3_moe"}) {
    auto golden = LoadTrainGolden(arch);
    ASSERT_TRUE(golden.ok()) << golden.status();
    std::string weights[2];
    int i = 0;
    for (const std::string restore : {"recompute", "offload"}) {
      const std::string prefix = TmpDir() + "/mpmoe_" + arch + "_" + restore;
      weights[i] = prefix + "_weights.safetensors";
      const nlohmann::json j = RunAndCheckGolden(
          *golden,
          GoldenArgs(arch, *golden, prefix) + " --micro_batches=4 --activation_restore=" + restore +
              " --weights_out=" + weights[i],
          prefix);
      ASSERT_TRUE(j.contains("schedule")) << j;
      for (const nlohmann::json& r : j.at("schedule")) {
        const int64_t flops = r.at("recomputed_flops").get<int64_t>();
        const int64_t offloaded = r.at("offloaded_activation_bytes").get<int64_t>();
        EXPECT_EQ(flops > 0, restore == "recompute") << r;
        EXPECT_EQ(offloaded > 0, restore == "offload") << r;
        EXPECT_EQ(r.at("restored_activation_bytes").get<int64_t>(), offloaded) << r;
        for (const nlohmann::json& n : r.at("micro_batches")) EXPECT_EQ(n.get<int>(), 4) << r;
        for (const nlohmann::json& how : r.at("activation_restore")) EXPECT_EQ(how, restore) << r;
      }
      ++i;
    }
    const std::string a = ReadFile(weights[0]), b = ReadFile(weights[1]);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << arch << ": offload and recompute trained different bits";
    for (const std::string& w : weights) std::remove(w.c_str());
  }
}

TEST(ExpertdTrainMicroBatchTest, BadRestoreStrategyIsAClearError) {
  const std::string batch = TmpDir() + "/mpmoe_errors_batch.json";
  std::ofstream(batch) << R"({"input_ids": [[1, 2, 3], [4, 5, 6]]})";
  Output o = RunTrain("--model=" + FixtureDir("mixtral") + " --batch=" + batch +
                      " --micro_batches=2 --activation_restore=swap");
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.err.find("--activation_restore"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("swap"), std::string::npos) << o.err;
  std::remove(batch.c_str());
}

}  // namespace
}  // namespace expertd::golden
