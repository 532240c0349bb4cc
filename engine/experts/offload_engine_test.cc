// Offloaded == resident, bitwise, through the real forward pass: every
// fixture (fp32 and bf16 weights) and zoo models of each architecture, random expert-store
// configurations (budget, host tier, policy, prefetch, hot pins, I/O threads), greedy generation
// with a KV cache and a batched multi-sequence step.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/zoo/generator.h"
#include "models/zoo/zoo_spec.h"

namespace expertd::engine {
namespace {

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// "zoo:<arch>": a generated model (tiny preset widened to 16 experts top-4 over
// 4 layers, bf16 weights, or f32 when `bf16` is false); else a fixture.
std::string ModelDir(const std::string& name, bool bf16) {
  if (name.rfind("zoo:", 0) != 0) return "tests/data/fixtures/" + name;
  const std::string arch = name.substr(4);
  const std::string dir = TempDir("zoo_" + arch + (bf16 ? "_bf16" : "_f32"));
  models::zoo::ZooSpec spec = *models::zoo::PresetSpec("tiny", *models::zoo::ParseZooArch(arch));
  spec.layers = 4;
  spec.experts = 16;
  spec.top_k = 4;
  spec.dtype = bf16 ? models::DType::kBF16 : models::DType::kF32;
  spec.seed = 5;
  EXPECT_TRUE(models::zoo::GenerateModel(spec, dir).ok());
  return dir;
}

std::shared_ptr<const models::Checkpoint> Open(const std::string& name, bool bf16) {
  models::CheckpointOptions co;
  const bool zoo = name.rfind("zoo:", 0) == 0;
  if (bf16 && !zoo) co.weights_file = "model.bf16.safetensors";
  auto c = models::Checkpoint::Open(ModelDir(name, bf16), co);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::shared_ptr<const models::Checkpoint>(std::move(*c));
}

std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const models::Checkpoint> ckpt,
                                   ExpertProviderFactory factory) {
  EngineOptions o;
  o.backend.threads = 2;
  o.expert_provider_factory = std::move(factory);
  auto e = Engine::Create(std::move(ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

ExpertStoreOptions RandomOptions(std::mt19937* rng, const std::string& pack_dir,
                                 int64_t total_experts) {
  ExpertStoreOptions o;
  o.pack_dir = pack_dir;
  o.device_cache_experts = 2 + (*rng)() % (total_experts - 1);
  o.host_cache_bytes = ((*rng)() % 2) * ((*rng)() % total_experts) * 70000;
  o.policy = (*rng)() % 2 ? PolicyKind::kLru : PolicyKind::kLfu;
  o.prefetch = static_cast<PrefetchKind>((*rng)() % 3);  // none, all, speculative
  o.pin_hot_fraction = (*rng)() % 2 ? 0.25 : 0;
  o.pin_refresh_steps = 2;
  o.io_threads = 1 + (*rng)() % 3;
  return o;
}

std::string Describe(const ExpertStoreOptions& o) {
  return "slots=" + std::to_string(o.device_cache_experts) +
         " host=" + std::to_string(o.host_cache_bytes) + " policy=" + PolicyKindName(o.policy) +
         " prefetch=" + PrefetchKindName(o.prefetch) +
         " pin=" + std::to_string(o.pin_hot_fraction) + " io=" + std::to_string(o.io_threads);
}

void ExpectSame(const GreedyResult& want, const GreedyResult& got, const std::string& what) {
  ASSERT_EQ(want.last_logits.size(), got.last_logits.size()) << what;
  EXPECT_EQ(std::memcmp(want.last_logits.data(), got.last_logits.data(),
                        want.last_logits.size() * sizeof(float)),
            0)
      << what;
  EXPECT_EQ(want.generated, got.generated) << what;
  ASSERT_EQ(want.routing.size(), got.routing.size()) << what;
  for (size_t l = 0; l < want.routing.size(); ++l)
    EXPECT_EQ(want.routing[l].expert_ids, got.routing[l].expert_ids);
}

class OffloadEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadEngineTest, BitwiseIdenticalToResidentUnderRandomConfigurations) {
  const std::string arch = GetParam();
  const std::string tag = arch.substr(arch.find(':') + 1);
  std::mt19937 rng(std::hash<std::string>()(arch) & 0xffff);
  for (bool bf16 : {false, true}) {
    auto ckpt = Open(arch, bf16);
    std::vector<int32_t> prompt = {1, 17, 300, 42, 7, 99, 250, 3, 11};
    for (int32_t& t : prompt) t %= ckpt->config().vocab_size;  // gpt_oss: 128 tokens
    const int64_t total = ckpt->config().num_moe_layers() * ckpt->config().num_experts;
    auto resident = MakeEngine(ckpt, nullptr);
    ASSERT_NE(resident, nullptr);
    auto want = RunGreedy(resident.get(), 1, prompt, /*generate=*/6);
    ASSERT_TRUE(want.ok()) << want.status();
    for (int trial = 0; trial < 5; ++trial) {
      ExpertStoreOptions o =
          RandomOptions(&rng, TempDir(tag + (bf16 ? "_bf16_pack" : "_f32_pack")), total);
      const std::string what = arch + (bf16 ? " bf16 " : " f32 ") + Describe(o);
      auto offloaded = MakeEngine(ckpt, ExpertStoreFactory(o));
      ASSERT_NE(offloaded, nullptr) << what;
      auto got = RunGreedy(offloaded.get(), 1, prompt, 6, /*prefill_chunk=*/trial == 2 ? 4 : 0);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status();
      ExpectSame(*want, *got, what);
    }
  }
}

TEST_P(OffloadEngineTest, BatchedPrefillNeedingEveryExpertRunsInWavesOnTwoSlots) {
  const std::string arch = GetParam();
  auto ckpt = Open(arch, false);
  ExpertStoreOptions o;
  o.pack_dir = TempDir(arch.substr(arch.find(':') + 1) + "_waves");
  o.device_cache_experts = 2;
  o.prefetch = PrefetchKind::kAll;
  auto resident = MakeEngine(ckpt, nullptr);
  auto offloaded = MakeEngine(ckpt, ExpertStoreFactory(o));
  ASSERT_NE(offloaded, nullptr);
  StepRequest req;
  for (SequenceId id : {1, 2, 3}) {
    ASSERT_TRUE(resident->AddSequence(id).ok());
    ASSERT_TRUE(offloaded->AddSequence(id).ok());
    std::vector<int32_t> tokens;
    for (int i = 0; i < 11 * static_cast<int>(id); ++i) {
      tokens.push_back(static_cast<int32_t>((i * 37 + id * 11) % ckpt->config().vocab_size));
    }
    req.chunks.push_back({id, tokens, /*all_logits=*/true});
  }
  for (int step = 0; step < 3; ++step) {
    auto a = resident->Step(req);
    auto b = offloaded->Step(req);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    for (size_t i = 0; i < a->sequences.size(); ++i) {
      const auto& x = a->sequences[i].logits;
      const auto& y = b->sequences[i].logits;
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
          << arch << " step " << step;
    }
    const int64_t vocab = ckpt->config().vocab_size;
    for (auto& c : req.chunks)
      c.tokens = {static_cast<int32_t>((c.id * 5 + step) % vocab)};  // decode next
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OffloadEngineTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen2_moe_mixed", "olmoe",
                                           "qwen3_moe", "deepseek_v3", "gpt_oss", "gpt_oss_mxfp4",
                                           "zoo:mixtral", "zoo:qwen2_moe", "zoo:qwen3_moe",
                                           "zoo:olmoe", "zoo:deepseek_v3"));

}  // namespace
}  // namespace expertd::engine
