#include "engine/sampling/sampler.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

SamplingParams Params(double temperature = 1.0) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

// Logits whose softmax is exactly proportional to `probs`.
std::vector<float> LogitsFor(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(SamplerTest, GreedyTakesTheMaxAndTheLowestIdOnTies) {
  Sampler s(Params(0.0), {});
  EXPECT_EQ(s.Sample(std::vector<float>{1, 3, 3, 2}).token, 1);
  EXPECT_EQ(s.Sample(std::vector<float>{-5, -1, -7}).token, 1);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p = Params(0.0);
  p.repetition_penalty = 2.0;
  Sampler s(p, {0, 1, 1});
  EXPECT_EQ(s.Penalized(std::vector<float>{3, -1, 2.5f}), (std::vector<float>{1.5f, -2, 2.5f}));
  EXPECT_EQ(s.Sample(std::vector<float>{3, -1, 2.5f}).token, 2);
  // The generated token is now penalised too.
  EXPECT_EQ(s.Penalized(std::vector<float>{3, -1, 2.5f}), (std::vector<float>{1.5f, -2, 1.25f}));
}

TEST(SamplerTest, PresenceAndFrequencyPenaliseGeneratedTokensOnly) {
  SamplingParams p = Params(0.0);
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.25;
  Sampler s(p, {2});  // prompt tokens are not penalised
  EXPECT_EQ(s.Sample(std::vector<float>{4, 1, 0}).token, 0);
  EXPECT_EQ(s.Sample(std::vector<float>{4, 1, 0}).token, 0);  // 4 - 0.75 = 3.25 still wins
  EXPECT_EQ(s.Penalized(std::vector<float>{4, 1, 0}),
            (std::vector<float>{3.0f, 1, 0}));  // 4 - 2*0.25 - 0.5
}

TEST(SamplerTest, TopKTopPAndMinPKeepTheDocumentedCandidates) {
  const std::vector<float> logits = LogitsFor({0.1, 0.5, 0.2, 0.15, 0.05});
  SamplingParams p = Params();
  Distribution all = Sampler(p, {}).Filtered(logits);
  EXPECT_EQ(all.ids, (std::vector<int32_t>{1, 2, 3, 0, 4}));
  EXPECT_NEAR(all.probs[0], 0.5, 1e-6);
  p.top_k = 2;
  Distribution k2 = Sampler(p, {}).Filtered(logits);
  EXPECT_EQ(k2.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(k2.probs[0], 0.5 / 0.7, 1e-6);
  p.top_k = 0;
  p.top_p = 0.8;  // 0.5 + 0.2 = 0.7 < 0.8 -> include 0.15 (reaches 0.85)
  EXPECT_EQ(Sampler(p, {}).Filtered(logits).ids, (std::vector<int32_t>{1, 2, 3}));
  p.top_p = 0.7;  // reached exactly by the first two (within rounding: allow both)
  const size_t n = Sampler(p, {}).Filtered(logits).ids.size();
  EXPECT_TRUE(n == 2 || n == 3);
  p.top_p = 1.0;
  p.min_p = 0.29;  // threshold 0.145: keeps 0.5, 0.2, 0.15
  EXPECT_EQ(Sampler(p, {}).Filtered(logits).ids, (std::vector<int32_t>{1, 2, 3}));
  p.min_p = 0.31;  // threshold 0.155: drops 0.15
  EXPECT_EQ(Sampler(p, {}).Filtered(logits).ids, (std::vector<int32_t>{1, 2}));
}

TEST(SamplerTest, TemperatureSharpensTheDistribution) {
  SamplingParams p = Params(0.5);
  Distribution d = Sampler(p, {}).Filtered(LogitsFor({0.25, 0.75}));
  EXPECT_EQ(d.ids, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(d.probs[0], 0.9, 1e-6);  // 0.75^2 / (0.75^2 + 0.25^2)
}

TEST(SamplerTest, SeededSamplingIsReproducibleAndFollowsTheDistribution) {
  const std::vector<float> logits = LogitsFor({0.6, 0.3, 0.1});
  SamplingParams p = Params();
  p.seed = 1234;
  Sampler a(p, {}), b(p, {});
  std::vector<int> counts(3, 0);
  std::vector<int32_t> seq_a, seq_b;
  for (int i = 0; i < 3000; ++i) {
    seq_a.push_back(a.Sample(logits).token);
    seq_b.push_back(b.Sample(logits).token);
    counts[seq_a.back()]++;
  }
  EXPECT_EQ(seq_a, seq_b);
  EXPECT_NEAR(counts[0] / 3000.0, 0.6, 0.04);
  EXPECT_NEAR(counts[1] / 3000.0, 0.3, 0.04);
  EXPECT_NEAR(counts[2] / 3000.0, 0.1, 0.03);
  p.seed = 99;
  Sampler c(p, {});
  std::vector<int32_t> seq_c;
  for (int i = 0; i < 3000; ++i) seq_c.push_back(c.Sample(logits).token);
  EXPECT_NE(seq_a, seq_c);
}

TEST(SamplerTest, LogprobsAreTheModelDistributionWithTopAlternatives) {
  SamplingParams p = Params(0.0);
  p.logprobs = true;
  p.top_logprobs = 2;
  p.repetition_penalty = 3.0;  // does not affect reported logprobs
  Sampler s(p, {0});
  SampleResult r = s.Sample(LogitsFor({0.5, 0.3, 0.2}));
  EXPECT_EQ(r.token, 1);  // 0 is penalised: log(0.5) * 3 < log(0.3)
  EXPECT_NEAR(r.logprob, std::log(0.3), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 0);
  EXPECT_NEAR(r.top[0].logprob, std::log(0.5), 1e-6);
  EXPECT_EQ(r.top[1].token, 1);
}

TEST(SamplerTest, LogitBiasShiftsGreedyAndSampledChoices) {
  SamplingParams p = Params(0.0);
  p.logit_bias = {{0, -100.0f}, {2, 0.3f}};
  Sampler greedy(p, {});
  // 0 is banned; 2's logit log(0.2) + 0.3 is still below 1's log(0.3), and
  // above it with a bias of 1.
  EXPECT_EQ(greedy.Sample(LogitsFor({0.5, 0.3, 0.2})).token, 1);
  p.logit_bias = {{0, -100.0f}, {2, 1.0f}};
  Sampler greedy2(p, {});
  EXPECT_EQ(greedy2.Sample(LogitsFor({0.5, 0.3, 0.2})).token, 2);  // log(0.2) + 1 > log(0.3)

  // Sampling: the filtered distribution is softmax(logits + bias).
  p = Params(1.0);
  p.logit_bias = {{1, static_cast<float>(std::log(3.0))}};  // 0.25 * 3 = 0.75 vs 0.25
  Sampler s(p, {});
  Distribution d = s.Filtered(LogitsFor({0.25, 0.25, 0.5}));
  ASSERT_EQ(d.ids.size(), 3u);
  EXPECT_EQ(d.ids[0], 1);
  EXPECT_NEAR(d.probs[0], 0.75 / 1.5, 1e-6);
  EXPECT_NEAR(d.probs[1], 0.5 / 1.5, 1e-6);

  // -100 on every token but one forces it, whatever the seed.
  p = Params(1.0);
  p.logit_bias = {{0, -100.0f}, {1, -100.0f}};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    Sampler forced(p, {});
    EXPECT_EQ(forced.Sample(LogitsFor({0.45, 0.45, 0.1})).token, 2);
  }
}

TEST(SamplerTest, LogitBiasLeavesReportedLogprobsAndIgnoresIdsOutsideTheLogits) {
  SamplingParams p = Params(0.0);
  p.logprobs = true;
  p.logit_bias = {{1, 10.0f}, {99, 100.0f}};  // 99 is past this vocabulary
  Sampler s(p, {});
  SampleResult r = s.Sample(LogitsFor({0.5, 0.3, 0.2}));
  EXPECT_EQ(r.token, 1);
  EXPECT_NEAR(r.logprob, std::log(0.3), 1e-6);  // the model's, as OpenAI reports
}

TEST(SamplerTest, ValidationNamesTheField) {
  SamplingParams p;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  p.top_p = 0.0;
  EXPECT_NE(ValidateSamplingParams(p).message().find("top_p"), std::string::npos);
  p = SamplingParams{};
  p.temperature = -1;
  EXPECT_NE(ValidateSamplingParams(p).message().find("temperature"), std::string::npos);
  p = SamplingParams{};
  p.presence_penalty = 2.5;
  EXPECT_NE(ValidateSamplingParams(p).message().find("presence_penalty"), std::string::npos);
  p = SamplingParams{};
  p.top_logprobs = 21;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p = SamplingParams{};
  p.repetition_penalty = NAN;
  EXPECT_FALSE(ValidateSamplingParams(p).ok());
  p = SamplingParams{};
  p.logit_bias = {{3, 100.5f}};
  EXPECT_NE(ValidateSamplingParams(p).message().find("logit_bias"), std::string::npos);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(ValidateSamplingParams(p).message().find("logit_bias"), std::string::npos);
  p.logit_bias = {{3, -100.0f}};
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
}

}  // namespace
}  // namespace expertd::engine
