// Pre-gated prefetch through the real forward pass: a fixture copy carrying
// pre-gate tensors (model.layers.N.mlp.pregate.weight, here the next MoE
// layer's router, so the guess is the speculative one) and the config key
// "expertd_pregate": true. Results stay bitwise those of the resident engine;
// a checkpoint declaring the key without the tensors is refused clearly.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/env.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/experts/pack/expert_pack_writer.h"
#include "engine/experts/prefetcher.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/tensor_names.h"
#include "models/safetensors/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace expertd::engine {
namespace {

std::string TempDir(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// Copies fixtures/<arch> to a temp dir, adding pre-gates for layers
// [0, num_layers - 1) when `with_tensors`, and the config key.
std::string MakePregatedCopy(const std::string& arch, bool with_tensors) {
  const std::string src = "tests/data/fixtures/" + arch;
  const std::string dst = TempDir(arch + (with_tensors ? "_pregated" : "_declared_only"));
  EXPECT_TRUE(CreateDirs(Env::Default(), dst).ok());
  auto ckpt = models::Checkpoint::Open(src);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  const models::ModelConfig& c = (*ckpt)->config();
  std::vector<models::TensorToWrite> tensors;
  for (const std::string& name : (*ckpt)->Names()) {
    auto v = (*ckpt)->Get(name);
    tensors.push_back({{name, v->dtype, v->shape}, v->data});
  }
  if (with_tensors) {
    for (int64_t layer = 0; layer + 1 < c.num_hidden_layers; ++layer) {
      auto next = (*ckpt)->Get(models::RouterName(c, layer + 1));
      EXPECT_TRUE(next.ok());
      tensors.push_back({{models::PregateName(c, layer), next->dtype, next->shape}, next->data});
    }
  }
  EXPECT_TRUE(models::WriteSafetensors(dst + "/model.safetensors", tensors).ok());
  std::ifstream in(src + "/config.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(text.str());
  config[kPregateConfigKey] = true;
  EXPECT_TRUE(WriteFileAtomically(Env::Default(), dst + "/config.json", config.dump(2)).ok());
  return dst;
}

TEST(PregateEngineTest, PregatedCheckpointRunsBitwiseIdenticalAndPredicts) {
  const std::string dir = MakePregatedCopy("mixtral", true);
  auto ckpt = models::Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_TRUE((*ckpt)->ValidateAgainstConfig().ok());
  std::shared_ptr<const models::Checkpoint> shared(std::move(*ckpt));
  EXPECT_TRUE(*ConfigDeclaresPregate(dir));
  const std::vector<int32_t> prompt = {1, 5, 9, 200, 31, 77};
  EngineOptions resident_options;
  resident_options.backend.threads = 1;
  auto resident = Engine::Create(shared, resident_options);
  ASSERT_TRUE(resident.ok()) << resident.status();
  auto want = RunGreedy(resident->get(), 1, prompt, 8);
  ASSERT_TRUE(want.ok());

  ExpertStoreOptions so;
  so.prefetch = PrefetchKind::kPregate;
  so.device_cache_experts = 6;
  ExpertStore* store = nullptr;
  EngineOptions eo = resident_options;
  eo.expert_provider_factory =
      [&](const ExpertProviderContext& ctx) -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
    auto s = ExpertStore::Create(ctx, so);
    if (!s.ok()) return s.status();
    store = s->get();
    return std::unique_ptr<ExpertProvider>(std::move(*s));
  };
  auto offloaded = Engine::Create(shared, eo);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  auto got = RunGreedy(offloaded->get(), 1, prompt, 8);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(
      std::memcmp(want->last_logits.data(), got->last_logits.data(), want->last_logits.size() * 4),
      0);
  EXPECT_EQ(want->generated, got->generated);
  ExpertStoreStats s = store->stats();
  EXPECT_GT(s.total.predicted, 0);
  EXPECT_EQ(s.layers[0].predicted, 0);  // the first MoE layer has no predecessor
  EXPECT_GT(s.layers[1].predicted, 0);
  EXPECT_NE(s.pack_path.find(dir + "/.expertd/"), std::string::npos)
      << s.pack_path;  // beside the checkpoint
}

TEST(PregateEngineTest, DeclaredButMissingPregatesAreRefused) {
  const std::string dir = MakePregatedCopy("qwen3_moe", false);
  auto ckpt = models::Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  ExpertStoreOptions so;
  so.prefetch = PrefetchKind::kPregate;
  EngineOptions eo;
  eo.backend.threads = 1;
  eo.expert_provider_factory = ExpertStoreFactory(so);
  auto engine = Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), eo);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("model.layers.0.mlp.pregate.weight"), std::string::npos)
      << engine.status();
  EXPECT_NE(engine.status().message().find(kPregateConfigKey), std::string::npos);
}

}  // namespace
}  // namespace expertd::engine
