// EngineOptions::expert_gemm: the grouped expert GEMM gives bitwise the
// logits of one GEMM per expert (which reads and writes the token rows in
// place through the CPU's row maps, or gathers and scatters them without),
// on every fixture, for a prefill and the decode steps after it; kAuto
// (2 threads, few rows per expert) groups.
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/backend/instrumented_backend.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::engine {
namespace {

struct EngineRun {
  std::vector<std::vector<float>> logits;  // per step
  int64_t grouped_matmuls = 0;
};

EngineRun RunEngine(const std::shared_ptr<const models::Checkpoint>& ckpt, ExpertGemm gemm,
                    bool row_maps = true) {
  EngineRun run;
  InstrumentedBackend* counted = nullptr;
  EngineOptions o;
  o.backend.threads = 2;
  o.backend.matmul_row_maps = row_maps;
  o.expert_gemm = gemm;
  o.backend_factory =
      [&counted](const BackendOptions& b) -> absl::StatusOr<std::unique_ptr<Backend>> {
    auto cpu = CreateBackend(b);
    if (!cpu.ok()) return cpu.status();
    auto wrapped = std::make_unique<InstrumentedBackend>(std::move(*cpu));
    counted = wrapped.get();
    return std::unique_ptr<Backend>(std::move(wrapped));
  };
  auto engine = Engine::Create(ckpt, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return run;
  EXPECT_TRUE((*engine)->AddSequence(1).ok());
  EXPECT_TRUE((*engine)->AddSequence(2).ok());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 33; ++i) prompt.push_back((i * 7 + 3) % 50);
  // A 33-token prefill beside a 1-token one, then decode steps of both.
  StepRequest first{{SequenceChunk{1, prompt}, SequenceChunk{2, {5}}}};
  auto r = (*engine)->Step(first);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return run;
  for (const SequenceResult& s : r->sequences) run.logits.push_back(s.logits);
  for (int step = 0; step < 3; ++step) {
    auto d = (*engine)->Step(StepRequest{{SequenceChunk{1, {step + 1}}, SequenceChunk{2, {step}}}});
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return run;
    for (const SequenceResult& s : d->sequences) run.logits.push_back(s.logits);
  }
  run.grouped_matmuls = counted->count(BackendCall::kGroupedMatmul);
  return run;
}

class ExpertGemmEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertGemmEngineTest, GroupedLogitsAreBitwiseThePerExpertOnes) {
  auto ckpt = models::Checkpoint::Open("tests/data/fixtures/" + GetParam());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::shared_ptr<const models::Checkpoint> shared(std::move(*ckpt));
  const EngineRun per_expert = RunEngine(shared, ExpertGemm::kPerExpert);
  const EngineRun grouped = RunEngine(shared, ExpertGemm::kGrouped);
  const EngineRun automatic = RunEngine(shared, ExpertGemm::kAuto);
  // Per expert without row maps: each expert's rows gathered and its outputs
  // scattered into the slots, as on a backend without them.
  const EngineRun copies = RunEngine(shared, ExpertGemm::kPerExpert, /*row_maps=*/false);
  EXPECT_EQ(per_expert.grouped_matmuls, 0);
  EXPECT_GT(grouped.grouped_matmuls, 0);
  // 2 threads, a few rows per expert: the rule groups.
  EXPECT_GT(automatic.grouped_matmuls, 0);
  ASSERT_EQ(per_expert.logits.size(), grouped.logits.size());
  ASSERT_EQ(per_expert.logits.size(), automatic.logits.size());
  ASSERT_EQ(per_expert.logits.size(), copies.logits.size());
  for (size_t i = 0; i < per_expert.logits.size(); ++i) {
    EXPECT_EQ(per_expert.logits[i], grouped.logits[i]) << "result " << i;
    EXPECT_EQ(per_expert.logits[i], automatic.logits[i]) << "result " << i;
    EXPECT_EQ(per_expert.logits[i], copies.logits[i]) << "result " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertGemmEngineTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen2_moe_mixed", "qwen3_moe",
                                           "olmoe", "deepseek_v3"));

}  // namespace
}  // namespace expertd::engine
