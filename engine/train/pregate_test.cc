// Pre-gate training: distillation lowers its loss, the trained heads predict
// the next MoE layer's experts on held-out tokens better than the speculative
// guess, and the checkpoint carries what the `pregate` prefetcher loads.
#include "engine/train/pregate.h"

#include <random>

#include "base/env.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/experts/prefetcher.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::train {
namespace {

std::string TmpDir() { return getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp"; }

std::vector<TrainBatch> RandomText(int batches, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<TrainBatch> out;
  for (int b = 0; b < batches; ++b) {
    TrainBatch batch{4, 33, {}, {}};
    for (int i = 0; i < 4 * 33; ++i) batch.input_ids.push_back(static_cast<int32_t>(rng() % vocab));
    out.push_back(std::move(batch));
  }
  return out;
}

TEST(PregateTest, TrainedHeadsBeatSpeculativeOnHeldOutText) {
  for (const char* arch : {"mixtral", "qwen2_moe_mixed"}) {
    const std::string dir = std::string("tests/data/fixtures/") + arch;
    auto model = TrainModel::Load(dir);
    ASSERT_TRUE(model.ok()) << model.status();
    const int32_t vocab = static_cast<int32_t>((*model)->config().vocab_size);
    const std::vector<TrainBatch> train = RandomText(24, 1, vocab),
                                  held_out = RandomText(8, 2, vocab);
    auto heads = TrainPregates(model->get(), train, PregateOptions{}, nullptr);
    ASSERT_TRUE(heads.ok()) << heads.status();
    EXPECT_LT(heads->step_losses.back(), heads->step_losses.front()) << arch;
    auto trained = EvaluatePregates(model->get(), &*heads, held_out, nullptr);
    auto speculative = EvaluatePregates(model->get(), nullptr, held_out, nullptr);
    ASSERT_TRUE(trained.ok() && speculative.ok());
    EXPECT_GT(trained->precision, speculative->precision) << arch;
    EXPECT_GT(trained->recall, speculative->recall) << arch;
    std::cerr << arch << ": held-out precision/recall trained " << trained->precision << " / "
              << trained->recall << ", speculative " << speculative->precision << " / "
              << speculative->recall << " over " << trained->tokens << " tokens\n";
  }
}

TEST(PregateTest, CheckpointDeclaresAndHoldsThePregates) {
  const std::string src = "tests/data/fixtures/mixtral";
  auto model = TrainModel::Load(src);
  ASSERT_TRUE(model.ok()) << model.status();
  PregateOptions options;
  options.steps = 5;
  auto heads = TrainPregates(model->get(), RandomText(2, 3, 512), options, nullptr);
  ASSERT_TRUE(heads.ok()) << heads.status();
  EXPECT_EQ(heads->heads.size(), 2u);  // layers 0 and 1 predict layers 1 and 2
  const std::string out = TmpDir() + "/pregate_ckpt";
  ASSERT_TRUE(WritePregateCheckpoint(src, *heads, out).ok());
  auto declared = engine::ConfigDeclaresPregate(out);
  ASSERT_TRUE(declared.ok()) << declared.status();
  EXPECT_TRUE(*declared);
  // The fixture has no generation_config.json; the checkpoint carries one
  // derived from the config, as save_pretrained would write it.
  EXPECT_TRUE(FileExists(Env::Default(), out + "/generation_config.json"));
  auto ckpt = models::Checkpoint::Open(out);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_TRUE((*ckpt)->ValidateAgainstConfig().ok());
  auto w = (*ckpt)->Get("model.layers.1.block_sparse_moe.pregate.weight");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->shape, (std::vector<int64_t>{8, 64}));
  auto reloaded = TrainModel::Load(out);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();

  // The serving engine's `pregate` prefetcher loads the trained heads (the
  // config declares them, so every one is required) and predicts with them;
  // the outputs stay those of the resident engine.
  std::shared_ptr<const models::Checkpoint> shared(std::move(*ckpt));
  engine::EngineOptions resident_options;
  resident_options.backend.threads = 1;
  auto resident = engine::Engine::Create(shared, resident_options);
  ASSERT_TRUE(resident.ok()) << resident.status();
  const std::vector<int32_t> prompt = {1, 5, 9, 200, 31, 77};
  auto want = engine::RunGreedy(resident->get(), 1, prompt, 4);
  ASSERT_TRUE(want.ok()) << want.status();
  engine::ExpertStoreOptions so;
  so.prefetch = engine::PrefetchKind::kPregate;
  so.device_cache_experts = 6;
  engine::EngineOptions eo = resident_options;
  eo.expert_provider_factory = engine::ExpertStoreFactory(so);
  auto pregated = engine::Engine::Create(shared, eo);
  ASSERT_TRUE(pregated.ok()) << pregated.status();
  auto got = engine::RunGreedy(pregated->get(), 1, prompt, 4);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(want->generated, got->generated);
  EXPECT_EQ(want->last_logits, got->last_logits);
}

}  // namespace
}  // namespace expertd::train
