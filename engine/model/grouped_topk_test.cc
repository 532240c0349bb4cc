#include "engine/model/grouped_topk.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

float Logit(float p) { return std::log(p / (1.0f - p)); }  // sigmoid^-1

// 8 experts in 4 groups of 2; pick the 2 best groups, then top-3 inside them.
TEST(GroupedSigmoidTopKTest, SelectsInsideTheBestGroupsAndWeighsByUnbiasedScores) {
  GroupedTopKConfig g{8, 3, 4, 2, true, 2.5f};
  const std::vector<float> p = {0.9f, 0.1f, 0.5f, 0.5f, 0.95f, 0.2f, 0.3f, 0.3f};
  // Group sums: {1.0, 1.0, 1.15, 0.6}; bias lifts group 1 to 1.4: groups 2 and 1 win.
  const std::vector<float> bias = {0, 0, 0.2f, 0.2f, 0, 0, 0, 0};
  std::vector<float> logits;
  for (float x : p) logits.push_back(Logit(x));
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  GroupedSigmoidTopK(g, logits.data(), bias.data(), 1, ids.data(), w.data());
  // Biased choices in groups 1,2: {0.7, 0.7, 0.95, 0.2}: experts 2, 3, 4 (expert 0's 0.9 is
  // masked).
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3, 4}));
  const float sum = 0.5f + 0.5f + 0.95f;  // unbiased scores
  EXPECT_NEAR(w[0], 2.5f * 0.5f / sum, 1e-6);
  EXPECT_NEAR(w[1], 2.5f * 0.5f / sum, 1e-6);
  EXPECT_NEAR(w[2], 2.5f * 0.95f / sum, 1e-6);
}

// Masked experts get 0.0, not -inf: with negative biases a masked expert can
// still be chosen over a kept one (as in the reference).
TEST(GroupedSigmoidTopKTest, MaskedExpertsScoreZeroNotMinusInfinity) {
  GroupedTopKConfig g{4, 2, 2, 1, false, 1.0f};
  const std::vector<float> logits = {Logit(0.6f), Logit(0.5f), Logit(0.1f), Logit(0.1f)};
  const std::vector<float> bias = {0.0f, -0.7f, 0.0f, 0.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  GroupedSigmoidTopK(g, logits.data(), bias.data(), 1, ids.data(), w.data());
  // Group 0 (0.6 - 0.2 = 0.4... choices {0.6, -0.2}) sums 0.4 > group 1's 0.2: kept.
  // Choices: {0.6, -0.2, 0 (masked), 0 (masked)}: top-2 = expert 0 and expert 2 (0 ties to the
  // lower id).
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 2}));
  EXPECT_NEAR(w[0], 0.6f, 1e-6);
  EXPECT_NEAR(w[1], 0.1f, 1e-6);  // unnormalised sigmoid score of expert 2
}

TEST(GroupedSigmoidTopKTest, RowsAreIndependent) {
  GroupedTopKConfig g{6, 2, 3, 2, true, 1.0f};
  const std::vector<float> bias(6, 0.0f);
  std::vector<float> a = {3, -1, 0, 2, -2, 1}, b = {-3, 1, 2, 0, 4, -1};
  std::vector<float> both = a;
  both.insert(both.end(), b.begin(), b.end());
  std::vector<int32_t> ids2(4), ids_a(2), ids_b(2);
  std::vector<float> w2(4), wa(2), wb(2);
  GroupedSigmoidTopK(g, both.data(), bias.data(), 2, ids2.data(), w2.data());
  GroupedSigmoidTopK(g, a.data(), bias.data(), 1, ids_a.data(), wa.data());
  GroupedSigmoidTopK(g, b.data(), bias.data(), 1, ids_b.data(), wb.data());
  EXPECT_EQ(std::vector<int32_t>(ids2.begin(), ids2.begin() + 2), ids_a);
  EXPECT_EQ(std::vector<int32_t>(ids2.begin() + 2, ids2.end()), ids_b);
  EXPECT_EQ(ids_a, (std::vector<int32_t>{0, 3}));
  EXPECT_NEAR(wa[0] + wa[1], 1.0f, 1e-6);
}

}  // namespace
}  // namespace expertd::engine
