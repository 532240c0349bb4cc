// EngineOptions::backend_factory: the engine runs on an injected backend.
// With InstrumentedBackend it counts what a step runs, and a device fault in
// a step is that step's error while the engine stays usable.
#include <cstring>
#include <memory>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/backend/instrumented_backend.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::engine {
namespace {

class BackendInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ckpt = models::Checkpoint::Open("tests/data/fixtures/mixtral");
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::shared_ptr<const models::Checkpoint>(std::move(*ckpt));
  }
  // An engine whose backend is an InstrumentedBackend over the CPU backend;
  // `*out` points at it (owned by the engine).
  std::unique_ptr<Engine> MakeEngine(InstrumentedBackend** out) {
    EngineOptions o;
    o.backend.threads = 2;
    o.backend_factory = [out](const BackendOptions& b) -> absl::StatusOr<std::unique_ptr<Backend>> {
      auto cpu = CreateBackend(b);
      if (!cpu.ok()) return cpu.status();
      auto wrapped = std::make_unique<InstrumentedBackend>(std::move(*cpu));
      *out = wrapped.get();
      return std::unique_ptr<Backend>(std::move(wrapped));
    };
    auto e = Engine::Create(checkpoint_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
  std::vector<float> Logits(Engine* e, SequenceId id, std::vector<int32_t> tokens) {
    auto r = e->Step(StepRequest{{SequenceChunk{id, std::move(tokens)}}});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->sequences[0].logits : std::vector<float>{};
  }

  std::shared_ptr<const models::Checkpoint> checkpoint_;
};

TEST_F(BackendInjectionTest, CountsOpsAndGivesTheSameLogitsAsThePlainBackend) {
  InstrumentedBackend* counted = nullptr;
  auto engine = MakeEngine(&counted);
  ASSERT_NE(engine, nullptr);
  ASSERT_NE(counted, nullptr);
  EXPECT_EQ(engine->backend(), counted);
  EngineOptions plain_options;
  plain_options.backend.threads = 2;
  auto plain = Engine::Create(checkpoint_, plain_options);
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(engine->AddSequence(1).ok());
  ASSERT_TRUE((*plain)->AddSequence(1).ok());
  const int64_t before = counted->ops();
  std::vector<float> got = Logits(engine.get(), 1, {3, 1, 4, 1, 5});
  std::vector<float> want = Logits(plain->get(), 1, {3, 1, 4, 1, 5});
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  // One forward pass: an embedding, attention in every layer, logits back.
  const int layers = static_cast<int>(engine->config().num_hidden_layers);
  EXPECT_GT(counted->ops(), before);
  EXPECT_EQ(counted->count(BackendCall::kAttention), layers);
  EXPECT_GE(counted->count(BackendCall::kEmbedding), 1);
  EXPECT_GE(counted->count(BackendCall::kCopyToHost), 1);
}

TEST_F(BackendInjectionTest, AFaultyOpFailsThatStepOnlyAndTheEngineStaysUsable) {
  InstrumentedBackend* backend = nullptr;
  auto engine = MakeEngine(&backend);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->AddSequence(1).ok());
  backend->FailNthOp(5, absl::InternalError("injected device fault"));
  auto failed = engine->Step(StepRequest{{SequenceChunk{1, {3, 1, 4}}}});
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(failed.status().message(), "injected device fault");
  // The caller drops the sequence (as the scheduler does); a new one runs.
  ASSERT_TRUE(engine->RemoveSequence(1).ok());
  EXPECT_EQ(engine->kv_cache_stats().blocks_free, engine->kv_cache_stats().blocks_total);
  ASSERT_TRUE(engine->AddSequence(2).ok());
  EXPECT_FALSE(Logits(engine.get(), 2, {3, 1, 4}).empty());
}

TEST_F(BackendInjectionTest, AFailedAllocationFailsCreateClearly) {
  EngineOptions o;
  o.backend_factory = [](const BackendOptions& b) -> absl::StatusOr<std::unique_ptr<Backend>> {
    auto cpu = CreateBackend(b);
    if (!cpu.ok()) return cpu.status();
    auto wrapped = std::make_unique<InstrumentedBackend>(std::move(*cpu));
    wrapped->FailNthAllocation(1, absl::ResourceExhaustedError("device memory full"));
    return std::unique_ptr<Backend>(std::move(wrapped));
  };
  auto e = Engine::Create(checkpoint_, o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(e.status().message().find("device memory full"), std::string::npos) << e.status();
}

TEST_F(BackendInjectionTest, AFailingFactoryFailsCreate) {
  EngineOptions o;
  o.backend_factory = [](const BackendOptions&) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return absl::UnavailableError("no device");
  };
  EXPECT_EQ(Engine::Create(checkpoint_, o).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace expertd::engine
