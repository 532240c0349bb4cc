#include "engine/sampling/sampler.h"

#include <cmath>
#include <map>

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

SampledToken Draw(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed = 1,
                  std::vector<int32_t> prompt = {}, std::vector<int32_t> output = {}, int top = 0) {
  Sampler s;
  SamplingRng rng(seed);
  return s.Sample(logits, p, prompt, output, top, &rng);
}

TEST(SamplerTest, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(Draw({0.1f, 3.0f, 2.0f}, p).id, 1);
  EXPECT_EQ(Draw({5.0f, 1.0f, 5.0f}, p).id, 0);
}

TEST(SamplerTest, RepetitionPenaltyHfSemantics) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  // token 0: 3.0 -> 1.5 (seen); token 1: 2.0 stays; so 1 wins.
  EXPECT_EQ(Draw({3.0f, 2.0f, -1.0f}, p, 1, {0}, {}).id, 1);
  // A seen negative logit gets more negative, never positive.
  EXPECT_EQ(Draw({-1.0f, -1.5f}, p, 1, {0}, {}).id, 1);  // -1*2=-2 < -1.5
  // Seen twice counts once: 3.0/2 = 1.5 > 1.4.
  EXPECT_EQ(Draw({3.0f, 1.4f}, p, 1, {0, 0}, {0}).id, 0);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesUseOutputOnly) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 1.0f;
  // token 0 appears 3 times in output: 5 - 3 = 2 < 2.5.
  EXPECT_EQ(Draw({5.0f, 2.5f}, p, 1, {}, {0, 0, 0}).id, 1);
  // In the prompt only: no penalty.
  EXPECT_EQ(Draw({5.0f, 2.5f}, p, 1, {0, 0, 0}, {}).id, 0);
  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = 2.0f;
  EXPECT_EQ(Draw({5.0f, 3.5f}, q, 1, {}, {0}).id, 1);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p;
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 50; ++seed) EXPECT_EQ(Draw({1.0f, 2.0f, 0.5f}, p, seed).id, 1);
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingMass) {
  // probs ~ [0.665, 0.245, 0.090]: top_p 0.6 keeps only token 0.
  SamplingParams p;
  p.top_p = 0.6f;
  std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  for (uint64_t seed = 0; seed < 50; ++seed) EXPECT_EQ(Draw(logits, p, seed).id, 0);
  // top_p 0.8 keeps 0 and 1 but never 2.
  p.top_p = 0.8f;
  std::map<int, int> seen;
  for (uint64_t seed = 0; seed < 400; ++seed) seen[Draw(logits, p, seed).id]++;
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen.count(2), 0u);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.min_p = 0.5f;  // keeps tokens with p >= 0.5 * p_max
  std::vector<float> logits = {2.0f, 1.9f, -3.0f};
  std::map<int, int> seen;
  for (uint64_t seed = 0; seed < 400; ++seed) seen[Draw(logits, p, seed).id]++;
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen.count(2), 0u);
}

TEST(SamplerTest, DistributionFollowsSoftmax) {
  SamplingParams p;  // temperature 1, no filters
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // probs 0.25 / 0.75
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += Draw(logits, p, 1000 + i).id;
  EXPECT_NEAR(ones / static_cast<double>(n), 0.75, 0.02);
}

TEST(SamplerTest, SameSeedSameStream) {
  SamplingParams p;
  std::vector<float> logits(64);
  for (int i = 0; i < 64; ++i) logits[i] = std::sin(i * 0.7f);
  Sampler a, b;
  SamplingRng ra(42), rb(42), rc(43);
  std::vector<int32_t> sa, sb, sc;
  Sampler c;
  for (int i = 0; i < 32; ++i) {
    sa.push_back(a.Sample(logits, p, {}, sa, 0, &ra).id);
    sb.push_back(b.Sample(logits, p, {}, sb, 0, &rb).id);
    sc.push_back(c.Sample(logits, p, {}, sc, 0, &rc).id);
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmax) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 5.0f;  // must not change reported logprobs
  std::vector<float> logits = {1.0f, 2.0f, 3.0f};
  SampledToken t = Draw(logits, p, 1, {2}, {}, 2);
  double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_EQ(t.id, 1);  // 3/5 = 0.6 < 2
  EXPECT_NEAR(t.logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 2);
  EXPECT_NEAR(t.top[0].second, 3.0 - lse, 1e-6);
  EXPECT_EQ(t.top[1].first, 1);
}

}  // namespace
}  // namespace expertd::engine
