// Batch invariance and chunking invariance, bitwise: a sequence's logits and
// routing do not depend on what else is in the step, on how its prompt was
// split into prefill chunks (prefill + decode vs one prefill), nor on the
// number of CPU threads. The serving scheduler relies on this.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/greedy.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "tests/golden/golden_data.h"

namespace expertd::golden {
namespace {

using engine::Engine;
using engine::SequenceChunk;
using engine::StepRequest;

std::unique_ptr<Engine> MakeEngine(const std::string& arch, int threads) {
  auto ckpt = models::Checkpoint::Open(FixtureDir(arch));
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  engine::EngineOptions opts;
  opts.backend.threads = threads;
  opts.kv_cache_bytes = 8 << 20;
  opts.kv_block_size = 4;  // small blocks: sequences span many, non-contiguous
  auto e = Engine::Create(std::shared_ptr<const models::Checkpoint>(std::move(*ckpt)), opts);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see an empty vector's data() (may be null): a dense layer routes nothing.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<int32_t> Prompt(const std::string& arch, size_t index) {
  auto g = LoadGolden(arch);
  EXPECT_TRUE(g.ok());
  return g->cases.at(index).input_ids;
}

class InvarianceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(InvarianceTest, ChunkedPrefillAndPrefillPlusDecodeEqualOnePrefill) {
  auto engine = MakeEngine(GetParam(), 2);
  const std::vector<int32_t> prompt = Prompt(GetParam(), 2);  // 33 tokens
  auto whole = engine::RunGreedy(engine.get(), 1, prompt, 4);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int64_t chunk : {1, 5, 16, 32}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    auto split = engine::RunGreedy(engine.get(), 2, prompt, 4, chunk);
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_TRUE(BitwiseEqual(split->last_logits, whole->last_logits));
    EXPECT_EQ(split->generated, whole->generated);
    for (size_t l = 0; l < whole->routing.size(); ++l) {
      EXPECT_EQ(split->routing[l].expert_ids, whole->routing[l].expert_ids);
      EXPECT_TRUE(BitwiseEqual(split->routing[l].weights, whole->routing[l].weights));
    }
  }
}

TEST_P(InvarianceTest, BatchedSequencesMatchTheirSoloRunsBitwise) {
  auto engine = MakeEngine(GetParam(), 3);
  const std::vector<std::vector<int32_t>> prompts = {Prompt(GetParam(), 2), Prompt(GetParam(), 0),
                                                     Prompt(GetParam(), 1)};
  const int64_t steps = 6;
  // Solo runs: prefill, then `steps` greedy decode steps.
  std::vector<std::vector<std::vector<float>>> solo(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    auto r = engine::RunGreedy(engine.get(), 100 + s, prompts[s], steps);
    ASSERT_TRUE(r.ok());
    solo[s].push_back(r->last_logits);
    ASSERT_TRUE(engine->AddSequence(200 + s).ok());
    StepRequest pre;
    pre.chunks.push_back(SequenceChunk{200 + s, prompts[s]});
    auto out = engine->Step(pre);
    ASSERT_TRUE(out.ok());
    for (int64_t i = 0; i + 1 < steps; ++i) {
      StepRequest dec;
      dec.chunks.push_back(SequenceChunk{200 + s, {r->generated[i]}});
      auto d = engine->Step(dec);
      ASSERT_TRUE(d.ok());
      solo[s].push_back(d->sequences[0].logits);
    }
    ASSERT_TRUE(engine->RemoveSequence(200 + s).ok());
  }
  // Batched: all prefills in one step, then decode all together; the third
  // sequence joins one step late (prefill beside the others' decodes).
  std::vector<int32_t> next(prompts.size());
  std::vector<size_t> done(prompts.size(), 0);
  for (size_t s = 0; s < prompts.size(); ++s) ASSERT_TRUE(engine->AddSequence(s).ok());
  for (int64_t step = 0; step <= steps; ++step) {
    StepRequest req;
    for (size_t s = 0; s < prompts.size(); ++s) {
      const int64_t start = s == 2 ? 1 : 0;
      if (step < start || done[s] >= solo[s].size()) continue;
      req.chunks.push_back(
          SequenceChunk{s, step == start ? prompts[s] : std::vector<int32_t>{next[s]}});
    }
    if (req.chunks.empty()) break;
    auto out = engine->Step(req);
    ASSERT_TRUE(out.ok()) << out.status();
    for (const auto& r : out->sequences) {
      const size_t s = r.id;
      EXPECT_TRUE(BitwiseEqual(r.logits, solo[s][done[s]])) << "seq " << s << " output " << done[s];
      next[s] = engine::Argmax(r.logits);
      ++done[s];
    }
  }
  for (size_t s = 0; s < prompts.size(); ++s) EXPECT_EQ(done[s], solo[s].size());
}

TEST_P(InvarianceTest, ThreadCountDoesNotChangeResults) {
  const std::vector<int32_t> prompt = Prompt(GetParam(), 2);
  auto one = engine::RunGreedy(MakeEngine(GetParam(), 1).get(), 1, prompt, 3);
  auto many = engine::RunGreedy(MakeEngine(GetParam(), 4).get(), 1, prompt, 3);
  ASSERT_TRUE(one.ok() && many.ok());
  EXPECT_TRUE(BitwiseEqual(one->last_logits, many->last_logits));
  EXPECT_EQ(one->generated, many->generated);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, InvarianceTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen2_moe_mixed", "qwen3_moe",
                                           "olmoe", "deepseek_v3", "gpt_oss"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace expertd::golden
