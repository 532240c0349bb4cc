#include "engine/model/expert_gemm.h"

#include "engine/backend/backend_factory.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

std::unique_ptr<Backend> Cpu(int threads) {
  BackendOptions o;
  o.threads = threads;
  return *CreateBackend(o);
}

TEST(ExpertGemmTest, ParsesItsNamesAndRefusesOthers) {
  for (ExpertGemm g : {ExpertGemm::kAuto, ExpertGemm::kPerExpert, ExpertGemm::kGrouped}) {
    absl::StatusOr<ExpertGemm> parsed = ParseExpertGemm(ExpertGemmName(g));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, g);
  }
  absl::StatusOr<ExpertGemm> bad = ParseExpertGemm("batched");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("per_expert"), std::string::npos);
}

TEST(ExpertGemmTest, AutoGroupsFewRowsPerExpertOnSeveralThreads) {
  const auto two = Cpu(2), one = Cpu(1);
  // Decode: 8 experts, one row each.
  EXPECT_TRUE(UseGroupedExpertGemm(ExpertGemm::kAuto, *two, 8, 8));
  // Just under and at the rows-per-expert crossover.
  EXPECT_TRUE(UseGroupedExpertGemm(ExpertGemm::kAuto, *two, 16, 16 * 128 - 1));
  EXPECT_FALSE(UseGroupedExpertGemm(ExpertGemm::kAuto, *two, 16, 16 * 128));
  // One expert, or one thread: nothing to gain.
  EXPECT_FALSE(UseGroupedExpertGemm(ExpertGemm::kAuto, *two, 1, 4));
  EXPECT_FALSE(UseGroupedExpertGemm(ExpertGemm::kAuto, *one, 8, 8));
}

TEST(ExpertGemmTest, ExplicitChoicesOverrideTheRule) {
  const auto one = Cpu(1);
  EXPECT_TRUE(UseGroupedExpertGemm(ExpertGemm::kGrouped, *one, 1, 4096));
  EXPECT_FALSE(UseGroupedExpertGemm(ExpertGemm::kPerExpert, *Cpu(2), 64, 64));
}

}  // namespace
}  // namespace expertd::engine
