// The whole model on the GPU against the CPU engine (itself checked against
// Hugging Face transformers by tests/golden) on every fixture:
//   fp32 weights: last logits within 1e-4 relative, identical top-k expert
//     ids at every MoE layer and token, identical 16 greedy tokens;
//   bf16 weights: last logits within 1e-2, identical greedy tokens;
//   decode batches are bitwise batch-invariant on the GPU;
//   experts offloaded to a 25% device budget (tiered store, every prefetch
//     mode) give the resident GPU engine's tokens.
// Skips on machines without a GPU.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_test_util.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::engine {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::RelError;

std::shared_ptr<const models::Checkpoint> Open(const std::string& arch, bool bf16) {
  models::CheckpointOptions co;
  if (bf16) co.weights_file = "model.bf16.safetensors";
  auto c = models::Checkpoint::Open("tests/data/fixtures/" + arch, co);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::shared_ptr<const models::Checkpoint>(std::move(*c)) : nullptr;
}

std::unique_ptr<Engine> MakeEngine(std::shared_ptr<const models::Checkpoint> ckpt,
                                   const std::string& backend,
                                   ExpertProviderFactory experts = nullptr) {
  EngineOptions o;
  o.backend.name = backend;
  o.backend.threads = 2;
  o.backend.device_memory_limit = backend == "cuda" ? (512ull << 20) : 0;
  o.kv_cache_bytes = 4 << 20;
  o.kv_block_size = 8;
  o.expert_provider_factory = std::move(experts);
  auto e = Engine::Create(std::move(ckpt), o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<int32_t> Prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 131 + 7) % vocab));
  return p;
}

class CudaEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngineTest, Fp32MatchesTheCpuEngineLogitsRoutingAndGreedyTokens) {
  EXPERTD_REQUIRE_GPU();
  auto ckpt = Open(GetParam(), false);
  ASSERT_NE(ckpt, nullptr);
  auto cpu = MakeEngine(ckpt, "cpu");
  auto gpu = MakeEngine(ckpt, "cuda");
  ASSERT_TRUE(cpu && gpu);
  for (int64_t n : {1, 7, 33}) {
    SCOPED_TRACE("prompt of " + std::to_string(n));
    const std::vector<int32_t> prompt = Prompt(n, ckpt->config().vocab_size);
    auto want = RunGreedy(cpu.get(), 1, prompt, 16);
    auto got = RunGreedy(gpu.get(), 1, prompt, 16);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_LT(RelError(got->last_logits, want->last_logits), 1e-4);
    EXPECT_EQ(got->generated, want->generated);
    ASSERT_EQ(got->routing.size(), want->routing.size());
    for (size_t l = 0; l < want->routing.size(); ++l) {
      EXPECT_EQ(got->routing[l].expert_ids, want->routing[l].expert_ids) << "layer " << l;
      EXPECT_LT(RelError(got->routing[l].weights, want->routing[l].weights), 1e-4) << "layer " << l;
    }
  }
}

TEST_P(CudaEngineTest, Bf16WeightsWithinBf16ToleranceAndSameGreedyTokens) {
  EXPERTD_REQUIRE_GPU();
  auto ckpt = Open(GetParam(), true);
  ASSERT_NE(ckpt, nullptr);
  auto cpu = MakeEngine(ckpt, "cpu");
  auto gpu = MakeEngine(ckpt, "cuda");
  ASSERT_TRUE(cpu && gpu);
  for (int64_t n : {1, 7, 33}) {
    SCOPED_TRACE("prompt of " + std::to_string(n));
    const std::vector<int32_t> prompt = Prompt(n, ckpt->config().vocab_size);
    auto want = RunGreedy(cpu.get(), 1, prompt, 16);
    auto got = RunGreedy(gpu.get(), 1, prompt, 16);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
    EXPECT_LT(RelError(got->last_logits, want->last_logits), 1e-2);
    EXPECT_EQ(got->generated, want->generated);
  }
}

// Three sequences decoding together: each one's logits are bitwise those it
// gets decoding alone (decode-sized steps use row-invariant kernels).
TEST_P(CudaEngineTest, DecodeStepsAreBitwiseBatchInvariant) {
  EXPERTD_REQUIRE_GPU();
  auto ckpt = Open(GetParam(), true);
  ASSERT_NE(ckpt, nullptr);
  auto gpu = MakeEngine(ckpt, "cuda");
  ASSERT_NE(gpu, nullptr);
  const int64_t vocab = ckpt->config().vocab_size;
  std::vector<std::vector<float>> alone;
  for (SequenceId id : {1, 2, 3}) {
    ASSERT_TRUE(gpu->AddSequence(id).ok());
    ASSERT_TRUE(gpu->Step(StepRequest{{SequenceChunk{id, Prompt(3 + 4 * id, vocab)}}}).ok());
    auto r = gpu->Step(StepRequest{{SequenceChunk{id, {static_cast<int32_t>(id)}}}});
    ASSERT_TRUE(r.ok()) << r.status();
    alone.push_back(r->sequences[0].logits);
    ASSERT_TRUE(gpu->RemoveSequence(id).ok());
  }
  StepRequest prefill, decode;
  for (SequenceId id : {1, 2, 3}) {
    ASSERT_TRUE(gpu->AddSequence(id).ok());
    ASSERT_TRUE(gpu->Step(StepRequest{{SequenceChunk{id, Prompt(3 + 4 * id, vocab)}}}).ok());
    decode.chunks.push_back(SequenceChunk{id, {static_cast<int32_t>(id)}});
  }
  auto r = gpu->Step(decode);
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(BitwiseEqual(r->sequences[i].logits, alone[i])) << "sequence " << i + 1;
}

TEST_P(CudaEngineTest, OffloadedToAQuarterBudgetGivesTheResidentTokens) {
  EXPERTD_REQUIRE_GPU();
  const std::string arch = GetParam();
  auto ckpt = Open(arch, true);
  ASSERT_NE(ckpt, nullptr);
  const int64_t total = ckpt->config().num_moe_layers() * ckpt->config().num_experts;
  auto resident = MakeEngine(ckpt, "cuda");
  ASSERT_NE(resident, nullptr);
  const std::vector<int32_t> prompt = Prompt(9, ckpt->config().vocab_size);
  auto want = RunGreedy(resident.get(), 1, prompt, 8);
  ASSERT_TRUE(want.ok()) << want.status();
  resident.reset();  // one GPU engine at a time
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (PrefetchKind prefetch :
       {PrefetchKind::kNone, PrefetchKind::kAll, PrefetchKind::kSpeculative}) {
    ExpertStoreOptions o;
    o.pack_dir = std::string(tmp ? tmp : "/tmp") + "/cuda_offload_" + arch;
    o.device_cache_experts = std::max<int64_t>(2, total / 4);
    o.host_cache_bytes = 64 << 20;
    o.prefetch = prefetch;
    auto offloaded = MakeEngine(ckpt, "cuda", ExpertStoreFactory(o));
    ASSERT_NE(offloaded, nullptr);
    auto got = RunGreedy(offloaded.get(), 1, prompt, 8);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->generated, want->generated) << PrefetchKindName(prefetch);
    // Prompt and decode steps are <= 16 tokens: only row-invariant,
    // deterministic kernels run, so the logits are bitwise the same.
    EXPECT_TRUE(BitwiseEqual(got->last_logits, want->last_logits)) << PrefetchKindName(prefetch);
    auto* cuda = dynamic_cast<CudaBackend*>(offloaded->backend());
    ASSERT_NE(cuda, nullptr);
    EXPECT_GT(cuda->copy_stats().h2d_bytes, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEngineTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen2_moe_mixed", "olmoe",
                                           "qwen3_moe", "deepseek_v3", "gpt_oss", "gpt_oss_mxfp4"));

}  // namespace
}  // namespace expertd::engine
