// Engine API behaviour: request validation, atomic steps under a full KV
// cache, and the ExpertProvider call contract (the expert store's seam).
#include "engine/engine.h"

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "engine/greedy.h"
#include "engine/model/resident_expert_provider.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::engine {
namespace {

constexpr char kMixtral[] = "tests/data/fixtures/mixtral";
constexpr char kQwenMixed[] = "tests/data/fixtures/qwen2_moe_mixed";

std::unique_ptr<Engine> MakeEngine(const std::string& dir, EngineOptions opts = {}) {
  auto ckpt = models::Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  opts.backend.threads = 2;
  auto e = Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), opts);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

TEST(EngineTest, RejectsMalformedRequestsWithoutSideEffects) {
  auto engine = MakeEngine(kMixtral);
  ASSERT_TRUE(engine->AddSequence(1).ok());
  auto code = [&](StepRequest req) { return engine->Step(req).status().code(); };
  EXPECT_EQ(code(StepRequest{}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(StepRequest{{SequenceChunk{7, {1}}}}), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(StepRequest{{SequenceChunk{1, {}}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(StepRequest{{SequenceChunk{1, {512}}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(StepRequest{{SequenceChunk{1, {-1}}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(StepRequest{{SequenceChunk{1, {1}}, SequenceChunk{1, {2}}}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(StepRequest{{SequenceChunk{1, std::vector<int32_t>(257, 3)}}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*engine->SequenceLength(1), 0);
  EXPECT_EQ(engine->AddSequence(1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine->RemoveSequence(5).code(), absl::StatusCode::kNotFound);
}

TEST(EngineTest, FullKvCacheFailsTheWholeStepAndRemovingFreesBlocks) {
  EngineOptions opts;
  opts.kv_block_size = 4;
  opts.kv_cache_bytes = 6 * 3 * 4 * (32 + 32) * 4;  // 6 blocks (3 layers, kv width 32)
  auto engine = MakeEngine(kMixtral, opts);
  EXPECT_EQ(engine->kv_cache_stats().blocks_total, 6);
  ASSERT_TRUE(engine->AddSequence(1).ok());
  ASSERT_TRUE(engine->AddSequence(2).ok());
  ASSERT_TRUE(
      engine->Step(StepRequest{{SequenceChunk{1, std::vector<int32_t>(12, 5)}}}).ok());  // 3 blocks
  EXPECT_EQ(engine->kv_cache_stats().blocks_free, 3);
  EXPECT_EQ(*engine->BlocksNeeded(2, 13), 4);
  // Seq 1 fits (+1 block) but seq 2 does not: nothing changes.
  auto st = engine->Step(
      StepRequest{{SequenceChunk{1, {7}}, SequenceChunk{2, std::vector<int32_t>(13, 9)}}});
  EXPECT_EQ(st.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->kv_cache_stats().blocks_free, 3);
  EXPECT_EQ(*engine->SequenceLength(1), 12);
  ASSERT_TRUE(engine->RemoveSequence(1).ok());
  EXPECT_EQ(engine->kv_cache_stats().blocks_free, 6);
  EXPECT_TRUE(engine->Step(StepRequest{{SequenceChunk{2, std::vector<int32_t>(13, 9)}}}).ok());
  EXPECT_EQ(*engine->SequenceLength(2), 13);
}

TEST(EngineTest, DeviceBudgetTooSmallIsAnErrorNotACrash) {
  auto ckpt = models::Checkpoint::Open(kMixtral);
  ASSERT_TRUE(ckpt.ok());
  EngineOptions opts;
  opts.backend.device_memory_limit = 1 << 20;  // the KV cache alone wants 64 MiB
  auto e = Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), opts);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kResourceExhausted) << e.status();
}

TEST(EngineTest, UnknownBackendIsAnError) {
  auto ckpt = models::Checkpoint::Open(kMixtral);
  ASSERT_TRUE(ckpt.ok());
  EngineOptions opts;
  opts.backend.name = "tpu";
  auto e = Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), opts);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
  EXPECT_NE(e.status().message().find("tpu"), std::string::npos) << e.status();
}

// Wraps the resident provider, records the calls, and computes experts in
// DESCENDING order: results must not change.
class RecordingProvider : public ExpertProvider {
 public:
  explicit RecordingProvider(std::unique_ptr<ExpertProvider> inner) : inner_(std::move(inner)) {}
  void BeginStep(int64_t n) override { log.push_back("begin " + std::to_string(n)); }
  void OnRouterInput(const RouterInput& in) override {
    log.push_back("input " + std::to_string(in.layer) + " next " +
                  std::to_string(in.next_moe_layer));
    EXPECT_EQ(in.next_router.empty(), in.next_moe_layer < 0);
  }
  void OnTokenRouting(int layer, absl::Span<const int32_t> ids, int top_k) override {
    log.push_back("tokens " + std::to_string(layer) + " " + std::to_string(ids.size() / top_k));
    token_ids.assign(ids.begin(), ids.end());
  }
  void OnRouting(int layer, absl::Span<const int32_t> experts) override {
    std::set<int32_t> from_tokens(token_ids.begin(), token_ids.end());
    EXPECT_EQ(std::vector<int32_t>(from_tokens.begin(), from_tokens.end()),
              std::vector<int32_t>(experts.begin(), experts.end()));
    log.push_back("routing " + std::to_string(layer));
  }
  void OrderForCompute(int layer, std::vector<int32_t>* experts) override {
    (void)layer;
    std::reverse(experts->begin(), experts->end());
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override {
    ++held;
    return inner_->Acquire(layer, expert);
  }
  void Release(int layer, int expert) override {
    --held;
    inner_->Release(layer, expert);
  }
  void EndStep() override {
    EXPECT_EQ(held, 0);
    log.push_back("end");
  }

  std::vector<std::string> log;
  std::vector<int32_t> token_ids;
  int held = 0;

 private:
  std::unique_ptr<ExpertProvider> inner_;
};

TEST(EngineTest, ExpertProviderSeesTheContractedCallsAndCannotChangeResults) {
  RecordingProvider* recorder = nullptr;
  EngineOptions opts;
  opts.expert_provider_factory =
      [&](const ExpertProviderContext& ctx) -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
    auto inner = ResidentExpertProvider::Create(ctx);
    if (!inner.ok()) return inner.status();
    auto p = std::make_unique<RecordingProvider>(std::move(*inner));
    recorder = p.get();
    return std::unique_ptr<ExpertProvider>(std::move(p));
  };
  auto custom = MakeEngine(kQwenMixed, opts);  // layer 1 is dense
  auto plain = MakeEngine(kQwenMixed);
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65};
  auto a = RunGreedy(custom.get(), 1, prompt, 1);
  auto b = RunGreedy(plain.get(), 1, prompt, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(0,
            std::memcmp(a->last_logits.data(), b->last_logits.data(), a->last_logits.size() * 4));
  const std::vector<std::string> want = {"begin 5",    "input 0 next 2", "tokens 0 5",
                                         "routing 0",  "input 1 next 2", "input 2 next -1",
                                         "tokens 2 5", "routing 2",      "end"};
  EXPECT_EQ(recorder->log, want);
}

TEST(EngineTest, ProviderErrorsFailTheStepAndRollBack) {
  class Failing : public ExpertProvider {
   public:
    void OnRouting(int, absl::Span<const int32_t>) override {}
    absl::StatusOr<ExpertWeights> Acquire(int, int) override {
      return absl::DataLossError("pack corrupt");
    }
    void Release(int, int) override {}
  };
  EngineOptions opts;
  opts.expert_provider_factory =
      [](const ExpertProviderContext&) -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
    return std::unique_ptr<ExpertProvider>(new Failing);
  };
  auto engine = MakeEngine(kMixtral, opts);
  ASSERT_TRUE(engine->AddSequence(1).ok());
  const int64_t free_before = engine->kv_cache_stats().blocks_free;
  auto r = engine->Step(StepRequest{{SequenceChunk{1, {1, 2, 3}}}});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(*engine->SequenceLength(1), 0);
  EXPECT_EQ(engine->kv_cache_stats().blocks_free, free_before);
}

}  // namespace
}  // namespace expertd::engine
