#include "client/bench/stats.h"

#include <cmath>

#include "gtest/gtest.h"

namespace expertd::bench {
namespace {

// Expected values are numpy's: np.percentile([5, 1, 9, 3, 7, 2], p) (default
// method "linear") and np.std (ddof = 0), worked out by hand: sorted
// [1, 2, 3, 5, 7, 9], rank = p/100 * 5.
TEST(StatsTest, PercentileMatchesNumpyLinear) {
  const std::vector<double> sorted = {1, 2, 3, 5, 7, 9};
  EXPECT_DOUBLE_EQ(Percentile(sorted, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(sorted, 50), 4);    // rank 2.5: 3 + 0.5 * 2
  EXPECT_DOUBLE_EQ(Percentile(sorted, 90), 8);    // rank 4.5
  EXPECT_DOUBLE_EQ(Percentile(sorted, 95), 8.5);  // rank 4.75
  EXPECT_DOUBLE_EQ(Percentile(sorted, 99), 8.9);  // rank 4.95
  EXPECT_NEAR(Percentile(sorted, 99.9), 8.99, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(sorted, 100), 9);
  EXPECT_DOUBLE_EQ(Percentile(sorted, 20), 2);  // rank exactly 1
}

TEST(StatsTest, PercentileOfOneAndNone) {
  EXPECT_DOUBLE_EQ(Percentile({42}, 0), 42);
  EXPECT_DOUBLE_EQ(Percentile({42}, 99), 42);
  EXPECT_DOUBLE_EQ(Percentile({}, 99), 0);
}

TEST(StatsTest, SummarizeUnsortedInput) {
  Distribution d = Summarize({5, 1, 9, 3, 7, 2}, {50, 90, 99});
  EXPECT_EQ(d.count, 6u);
  EXPECT_DOUBLE_EQ(d.mean, 4.5);
  EXPECT_NEAR(d.std, std::sqrt(47.5 / 6), 1e-12);  // population std
  EXPECT_DOUBLE_EQ(d.median, 4);
  EXPECT_DOUBLE_EQ(d.min, 1);
  EXPECT_DOUBLE_EQ(d.max, 9);
  ASSERT_EQ(d.percentiles.size(), 3u);
  EXPECT_DOUBLE_EQ(d.At(50), 4);
  EXPECT_DOUBLE_EQ(d.At(90), 8);
  EXPECT_DOUBLE_EQ(d.At(99), 8.9);
  EXPECT_EQ(d.At(95), -1);  // not requested
}

TEST(StatsTest, SummarizeEmptyIsZeros) {
  Distribution d = Summarize({}, {50, 99});
  EXPECT_EQ(d.count, 0u);
  EXPECT_EQ(d.mean, 0);
  EXPECT_EQ(d.std, 0);
  EXPECT_EQ(d.At(99), 0);
}

TEST(StatsTest, PercentilesAreOrdered) {
  std::vector<double> values;
  for (int i = 0; i < 1000; ++i) values.push_back(std::fmod(i * 7919.0, 1009.0) / 3.0);
  Distribution d = Summarize(values, {50, 90, 95, 99});
  EXPECT_LE(d.min, d.At(50));
  EXPECT_LE(d.At(50), d.At(90));
  EXPECT_LE(d.At(90), d.At(95));
  EXPECT_LE(d.At(95), d.At(99));
  EXPECT_LE(d.At(99), d.max);
  EXPECT_EQ(d.At(50), d.median);
}

}  // namespace
}  // namespace expertd::bench
