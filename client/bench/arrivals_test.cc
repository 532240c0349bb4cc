#include "client/bench/arrivals.h"

#include <cmath>
#include <vector>

#include "client/bench/random.h"
#include "gtest/gtest.h"

namespace expertd::bench {
namespace {

struct Moments {
  double mean = 0, variance = 0;
};

Moments GapMoments(ArrivalProcess* p, int n) {
  std::vector<double> gaps(n);
  double sum = 0;
  for (double& g : gaps) sum += g = p->NextGapSeconds();
  Moments m;
  m.mean = sum / n;
  for (double g : gaps) m.variance += (g - m.mean) * (g - m.mean);
  m.variance /= n - 1;
  return m;
}

// With n = 200000 samples the relative standard error of the mean is
// CV / sqrt(n) <= 2 / 447 ~ 0.5%, and of the variance a few percent: the
// tolerances below are several standard errors wide.
TEST(ArrivalsTest, PoissonHasTheRequestedRateAndExponentialGaps) {
  ArrivalProcess p(/*rate=*/8.0, /*burstiness=*/1.0, /*seed=*/1);
  Moments m = GapMoments(&p, 200000);
  EXPECT_NEAR(m.mean, 1.0 / 8, 0.01 / 8);
  EXPECT_NEAR(m.variance, 1.0 / 64, 0.05 / 64);  // exponential: variance = mean^2
}

TEST(ArrivalsTest, PoissonCountsPerWindowHaveEqualMeanAndVariance) {
  // Arrivals in windows of 1 s at rate 20 are Poisson(20): mean = variance = 20.
  ArrivalProcess p(20.0, 1.0, 2);
  const int windows = 20000;
  std::vector<int> counts(windows, 0);
  double t = p.NextGapSeconds();
  while (t < windows) {
    ++counts[static_cast<int>(t)];
    t += p.NextGapSeconds();
  }
  double mean = 0, var = 0;
  for (int c : counts) mean += c;
  mean /= windows;
  for (int c : counts) var += (c - mean) * (c - mean);
  var /= windows - 1;
  EXPECT_NEAR(mean, 20, 0.2);
  EXPECT_NEAR(var, 20, 1.0);
}

class GammaBurstinessTest : public ::testing::TestWithParam<double> {};

// Gamma gaps with shape B and scale 1/(R B): mean 1/R, variance 1/(B R^2).
TEST_P(GammaBurstinessTest, MeanIsOneOverRateAndVarianceShrinksWithBurstiness) {
  const double rate = 5.0, b = GetParam();
  ArrivalProcess p(rate, b, 3);
  Moments m = GapMoments(&p, 200000);
  EXPECT_NEAR(m.mean, 1.0 / rate, 0.02 / rate) << "burstiness " << b;
  const double want = 1.0 / (b * rate * rate);
  EXPECT_NEAR(m.variance, want, 0.06 * want) << "burstiness " << b;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GammaBurstinessTest, ::testing::Values(0.25, 0.5, 2.0, 4.0));

TEST(ArrivalsTest, InfiniteRateSendsEverythingAtOnce) {
  ArrivalProcess p(INFINITY, 1.0, 4);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(p.NextGapSeconds(), 0);
}

TEST(ArrivalsTest, SameSeedSameGapsOtherSeedOtherGaps) {
  ArrivalProcess a(3, 0.5, 9), b(3, 0.5, 9), c(3, 0.5, 10);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const double x = a.NextGapSeconds();
    EXPECT_EQ(x, b.NextGapSeconds());
    differs = differs || x != c.NextGapSeconds();
  }
  EXPECT_TRUE(differs);
}

// The samplers are our own so the values are the same with any standard
// library; pin the first draws of one seed.
TEST(RandomTest, DrawsArePinnedForASeed) {
  Rng r(42);
  Rng same(42);
  const uint64_t first = r.Next();
  EXPECT_EQ(first, same.Next());
  EXPECT_EQ(first, std::mt19937_64(42)());  // the engine is the standard's
  EXPECT_NE(DeriveSeed(1, 1), DeriveSeed(1, 2));
  EXPECT_NE(DeriveSeed(1, 1), DeriveSeed(2, 1));
}

TEST(RandomTest, UniformIntCoversTheRangeEvenly) {
  Rng r(5);
  std::vector<int> hist(7, 0);
  for (int i = 0; i < 70000; ++i) ++hist[r.UniformInt(7)];
  for (int h : hist) EXPECT_NEAR(h, 10000, 400);
}

TEST(RandomTest, NormalAndGammaMoments) {
  Rng r(6);
  const int n = 200000;
  double s = 0, s2 = 0, g = 0, g2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = r.Normal(3, 2);
    s += x;
    s2 += x * x;
    const double y = r.Gamma(0.3, 2.0);  // mean 0.6, variance 1.2
    g += y;
    g2 += y * y;
  }
  EXPECT_NEAR(s / n, 3, 0.02);
  EXPECT_NEAR(s2 / n - (s / n) * (s / n), 4, 0.06);
  EXPECT_NEAR(g / n, 0.6, 0.01);
  EXPECT_NEAR(g2 / n - (g / n) * (g / n), 1.2, 0.06);
}

}  // namespace
}  // namespace expertd::bench
