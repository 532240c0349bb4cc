#include "models/checkpoint/checkpoint.h"

#include <errno.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/fault_injection_env.h"
#include "base/memory_env.h"
#include "gtest/gtest.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/checkpoint/tensor_names.h"
#include "models/safetensors/safetensors_writer.h"

namespace expertd::models {
namespace {

const char* const kFixtures[] = {"mixtral", "qwen2_moe", "qwen2_moe_mixed",
                                 "olmoe",   "qwen3_moe", "deepseek_v3"};

std::string FixtureDir(const std::string& arch) { return "tests/data/fixtures/" + arch; }

void CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
}

// A fresh directory holding `arch`'s config.json (and nothing else).
std::string NewDirWithConfig(const std::string& name, const std::string& arch) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  ::mkdir(dir.c_str(), 0755);
  CopyFile(FixtureDir(arch) + "/config.json", dir + "/config.json");
  return dir;
}

// The fixture's tensors, to be edited and written back out.
std::vector<TensorToWrite> FixtureTensors(const Checkpoint& ckpt) {
  std::vector<TensorToWrite> out;
  for (const std::string& name : ckpt.Names()) {
    TensorView v = *ckpt.Get(name);
    out.push_back({{name, v.dtype, v.shape}, v.data});
  }
  return out;
}

std::unique_ptr<Checkpoint> OpenFixture(const std::string& arch) {
  auto c = Checkpoint::Open(FixtureDir(arch));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

void ExpectMessageHas(const absl::Status& s, const std::vector<std::string>& fragments) {
  ASSERT_FALSE(s.ok());
  for (const std::string& f : fragments)
    EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
}

TEST(CheckpointTest, EveryFixtureOpensAndValidatesInFp32AndBf16) {
  for (const std::string arch : kFixtures) {
    auto f32 = Checkpoint::Open(FixtureDir(arch));
    ASSERT_TRUE(f32.ok()) << f32.status();
    EXPECT_TRUE((*f32)->ValidateAgainstConfig().ok()) << (*f32)->ValidateAgainstConfig();
    EXPECT_EQ((*f32)->Names().size(), ExpectedTensors((*f32)->config()).size());
    EXPECT_EQ((*f32)->dir(), FixtureDir(arch));
    EXPECT_EQ((*f32)->files(), std::vector<std::string>{FixtureDir(arch) + "/model.safetensors"});

    auto bf16 = Checkpoint::Open(FixtureDir(arch), {"model.bf16.safetensors"});
    ASSERT_TRUE(bf16.ok()) << bf16.status();
    EXPECT_TRUE((*bf16)->ValidateAgainstConfig().ok()) << (*bf16)->ValidateAgainstConfig();
    TensorView embed = *(*bf16)->Get(EmbedTokensName());
    EXPECT_EQ(embed.dtype, DType::kBF16);
    EXPECT_EQ((*bf16)->total_bytes() * 2,
              (*f32)->total_bytes() + (arch == "deepseek_v3" ? 2 * 4 * 16 : 0))
        << arch;
  }
}

TEST(CheckpointTest, TensorViewsPointIntoTheFile) {
  auto ckpt = OpenFixture("mixtral");
  TensorView v = *ckpt->GetWithShape(FinalNormName(), {64});
  EXPECT_EQ(v.numel(), 64);
  EXPECT_EQ(v.nbytes, 256u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 4, 0u);
  std::ifstream in(v.file, std::ios::binary);
  in.seekg(v.file_offset);
  std::vector<char> bytes(v.nbytes);
  in.read(bytes.data(), bytes.size());
  EXPECT_EQ(std::memcmp(bytes.data(), v.data, v.nbytes), 0);
  EXPECT_TRUE(ckpt->Has(RouterName(ckpt->config(), 0)));
  EXPECT_FALSE(ckpt->Has("model.layers.0.mlp.gate.weight"));
}

TEST(CheckpointTest, GetErrorsNameTheTensor) {
  auto ckpt = OpenFixture("olmoe");
  absl::Status missing = ckpt->Get("no.such").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  ExpectMessageHas(missing, {"'no.such'"});
  absl::Status shape = ckpt->GetWithShape(FinalNormName(), {65}).status();
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument);
  ExpectMessageHas(shape, {"model.norm.weight", "[64]", "[65]"});
}

TEST(CheckpointTest, MissingDirectoryConfigOrWeights) {
  auto none = Checkpoint::Open("tests/data/fixtures/nope");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  std::string dir = NewDirWithConfig("noweights", "mixtral");
  auto noweights = Checkpoint::Open(dir);
  EXPECT_EQ(noweights.status().code(), absl::StatusCode::kNotFound);
  ExpectMessageHas(noweights.status(), {"model.safetensors"});
  auto absolute =
      Checkpoint::Open(FixtureDir("mixtral"), {std::string(std::getenv("TEST_SRCDIR")) + "/" +
                                               std::getenv("TEST_WORKSPACE") + "/" +
                                               FixtureDir("olmoe") + "/model.safetensors"});
  ASSERT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_TRUE((*absolute)->Has(
      "model.layers.0.self_attn.q_norm.weight"));  // OLMoE's weights, Mixtral's config
  auto nofile = Checkpoint::Open(FixtureDir("mixtral"), {"model.fp8.safetensors"});
  EXPECT_EQ(nofile.status().code(), absl::StatusCode::kNotFound);
  ExpectMessageHas(nofile.status(), {"model.fp8.safetensors"});
}

TEST(CheckpointTest, GenerationConfigOverridesTokens) {
  auto fixture = OpenFixture("mixtral");
  std::string dir = NewDirWithConfig("genconfig", "mixtral");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", FixtureTensors(*fixture)).ok());
  std::ofstream(dir + "/generation_config.json")
      << R"({"eos_token_id": [5, 6], "bos_token_id": 4})";
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->config().eos_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ((*ckpt)->config().bos_token_id, 4);
  EXPECT_TRUE((*ckpt)->ValidateAgainstConfig().ok());
}

TEST(CheckpointTest, MissingTensorIsNamed) {
  auto fixture = OpenFixture("qwen2_moe");
  std::vector<TensorToWrite> tensors = FixtureTensors(*fixture);
  const std::string victim = ExpertWeightName(fixture->config(), 1, 5, ExpertProj::kUp);
  tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                               [&](const TensorToWrite& t) { return t.spec.name == victim; }),
                tensors.end());
  std::string dir = NewDirWithConfig("missing", "qwen2_moe");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ExpectMessageHas((*ckpt)->ValidateAgainstConfig(), {"lacks 1 tensor", victim});
}

TEST(CheckpointTest, WrongShapeIsNamed) {
  auto fixture = OpenFixture("qwen3_moe");
  std::vector<TensorToWrite> tensors = FixtureTensors(*fixture);
  const std::string router = RouterName(fixture->config(), 2);
  for (TensorToWrite& t : tensors) {
    if (t.spec.name == router) t.spec.shape = {4, 128};  // same bytes, wrong shape
  }
  std::string dir = NewDirWithConfig("shape", "qwen3_moe");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ExpectMessageHas((*ckpt)->ValidateAgainstConfig(),
                   {router, "[4, 128]", "[8, 64]", "Qwen3MoeForCausalLM"});
}

TEST(CheckpointTest, UnknownTensorsAreErrorsButPregatesAreAllowed) {
  auto fixture = OpenFixture("mixtral");
  std::vector<TensorToWrite> tensors = FixtureTensors(*fixture);
  std::vector<float> pregate(8 * 64, 0.5f);
  tensors.push_back({{PregateName(fixture->config(), 0), DType::kF32, {8, 64}}, pregate.data()});
  std::string dir = NewDirWithConfig("pregate", "mixtral");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  auto ok = Checkpoint::Open(dir);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE((*ok)->ValidateAgainstConfig().ok()) << (*ok)->ValidateAgainstConfig();

  tensors.push_back({{"model.layers.0.mlp.gate.weight", DType::kF32, {8, 64}}, pregate.data()});
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  auto bad = Checkpoint::Open(dir);
  ASSERT_TRUE(bad.ok()) << bad.status();
  ExpectMessageHas((*bad)->ValidateAgainstConfig(),
                   {"does not use", "model.layers.0.mlp.gate.weight"});
}

TEST(CheckpointTest, ConfigMismatchIsDetected) {
  // OLMoE weights under a config claiming more experts.
  auto fixture = OpenFixture("olmoe");
  std::string dir = NewDirWithConfig("moreexperts", "olmoe");
  std::ifstream in(FixtureDir("olmoe") + "/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"num_experts\": 8"), 16, "\"num_experts\": 9");
  std::ofstream(dir + "/config.json", std::ios::trunc) << text;
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", FixtureTensors(*fixture)).ok());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ExpectMessageHas((*ckpt)->ValidateAgainstConfig(),
                   {"model.layers.0.mlp.gate.weight", "[8, 64]", "[9, 64]"});
}

TEST(CheckpointTest, CorruptWeightsFileNamesTheFile) {
  std::string dir = NewDirWithConfig("corrupt", "mixtral");
  std::ifstream in(FixtureDir("mixtral") + "/model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.resize(bytes.size() / 2);  // truncated download
  std::ofstream(dir + "/model.safetensors", std::ios::binary) << bytes;
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument);
  ExpectMessageHas(ckpt.status(), {dir + "/model.safetensors", "past the end"});
}

TEST(CheckpointTest, MisalignedTensorIsCopiedAligned) {
  // A legal but unusual file: an F32 tensor starting at byte 2 of the data.
  std::string header = R"({"a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  const float value = 3.5f;
  bytes += header + std::string(2, '\0') + std::string(reinterpret_cast<const char*>(&value), 4);
  std::string dir = NewDirWithConfig("misaligned", "mixtral");
  std::ofstream(dir + "/odd.safetensors", std::ios::binary) << bytes;
  auto ckpt = Checkpoint::Open(dir, {"odd.safetensors"});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  TensorView b = *(*ckpt)->Get("b");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 4, 0u);
  EXPECT_EQ(*static_cast<const float*>(b.data), 3.5f);
  EXPECT_EQ(b.file_offset % 4, 2u);  // still the true file offset
  ExpectMessageHas((*ckpt)->ValidateAgainstConfig(), {"lacks"});
}

// The checkpoint reads through the Env seam: a copy of a fixture in memory
// opens and validates like the files on disk; read errors name the file.
TEST(CheckpointTest, OpensFromAnInMemoryEnv) {
  MemoryEnv mem;
  ASSERT_TRUE(CreateDirs(&mem, "/models/mixtral").ok());
  auto names = Env::Default()->ListDir(FixtureDir("mixtral"));
  ASSERT_TRUE(names.ok());
  for (const std::string& name : *names) {
    auto bytes = ReadFileToString(Env::Default(), FixtureDir("mixtral") + "/" + name);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_TRUE(WriteFileAtomically(&mem, "/models/mixtral/" + name, *bytes).ok());
  }
  CheckpointOptions o;
  o.env = &mem;
  auto ckpt = Checkpoint::Open("/models/mixtral", o);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->ValidateAgainstConfig().ok());
  auto disk = OpenFixture("mixtral");
  EXPECT_EQ((*ckpt)->config().eos_token_ids, disk->config().eos_token_ids);
  ASSERT_EQ((*ckpt)->Names(), disk->Names());
  for (const std::string& name : disk->Names()) {
    TensorView a = *(*ckpt)->Get(name), b = *disk->Get(name);
    ASSERT_EQ(a.nbytes, b.nbytes) << name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << name;
  }

  EXPECT_EQ(Checkpoint::Open("/models/none", o).status().code(), absl::StatusCode::kNotFound);
  FaultInjectionEnv faulty(&mem);
  faulty.FailNth(FaultOp::kRead, 1, EIO);
  o.env = &faulty;
  auto failed = Checkpoint::Open("/models/mixtral", o);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  ExpectMessageHas(failed.status(), {"/models/mixtral/config.json", "Input/output error"});
}

}  // namespace
}  // namespace expertd::models
