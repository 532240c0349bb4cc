#include "engine/train/expert_placement.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

// The optimal makespan over every assignment of the free jobs (D^free).
double BruteForceMakespan(const std::vector<double>& cost, int devices,
                          const std::vector<int>& fixed) {
  std::vector<double> base(devices, 0.0);
  std::vector<int> free;
  for (size_t j = 0; j < cost.size(); ++j) {
    if (!fixed.empty() && fixed[j] >= 0) {
      base[fixed[j]] += cost[j];
    } else {
      free.push_back(static_cast<int>(j));
    }
  }
  int64_t combos = 1;
  for (size_t i = 0; i < free.size(); ++i) combos *= devices;
  double best = -1;
  for (int64_t c = 0; c < combos; ++c) {
    std::vector<double> load = base;
    int64_t code = c;
    for (int j : free) {
      load[code % devices] += cost[j];
      code /= devices;
    }
    const double m = *std::max_element(load.begin(), load.end());
    if (best < 0 || m < best) best = m;
  }
  return best;
}

std::vector<double> RandomCosts(std::mt19937* rng, int jobs) {
  // Mixed scales: a few heavy experts and many light ones, as skewed routing gives.
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> cost(jobs);
  for (double& c : cost) c = u(*rng) < 0.3 ? 5 + 10 * u(*rng) : 0.5 + 3 * u(*rng);
  return cost;
}

TEST(ExpertPlacementTest, GreedyIsWithinFourThirdsOfOptimal) {
  std::mt19937 rng(2024);
  double worst = 0;
  int cases = 0;
  for (int devices = 2; devices <= 4; ++devices) {
    for (int jobs = 1; jobs <= 9; ++jobs) {
      if (jobs > 8 && devices > 3) continue;  // keep D^E small
      for (int rep = 0; rep < 40; ++rep) {
        const std::vector<double> cost = RandomCosts(&rng, jobs);
        const ExpertPlacement p = PlaceLongestFirst(cost, devices, {});
        const double opt = BruteForceMakespan(cost, devices, {});
        const double bound = 4.0 / 3.0 - 1.0 / (3.0 * devices);
        ASSERT_LE(p.makespan(), bound * opt * (1 + 1e-12))
            << "D=" << devices << " E=" << jobs << " rep " << rep;
        worst = std::max(worst, p.makespan() / opt);
        ++cases;
      }
    }
  }
  std::printf("LPT without pins: %d cases, worst greedy/optimal %.4f\n", cases, worst);
}

// Graham's tight example: 2D+1 jobs of lengths 2D-1, 2D-1, 2D-2, 2D-2, ...,
// D+1, D+1, D, D, D reach the bound exactly.
TEST(ExpertPlacementTest, TightCaseReachesTheBound) {
  const int devices = 3;
  const std::vector<double> cost = {5, 5, 4, 4, 3, 3, 3};
  const ExpertPlacement p = PlaceLongestFirst(cost, devices, {});
  EXPECT_DOUBLE_EQ(p.makespan(), 11.0);
  EXPECT_DOUBLE_EQ(BruteForceMakespan(cost, devices, {}), 9.0);
  EXPECT_DOUBLE_EQ(11.0 / 9.0, 4.0 / 3.0 - 1.0 / 9.0);
}

TEST(ExpertPlacementTest, PinnedStartsAreWithinLeesBoundOfOptimal) {
  std::mt19937 rng(7);
  double worst = 0;
  int cases = 0, over_four_thirds = 0;
  for (int devices = 2; devices <= 3; ++devices) {
    for (int jobs = 4; jobs <= 9; ++jobs) {
      for (int rep = 0; rep < 40; ++rep) {
        const std::vector<double> cost = RandomCosts(&rng, jobs);
        std::vector<int> fixed(jobs, -1);
        for (int j = 0; j < jobs / 4; ++j) fixed[rng() % jobs] = static_cast<int>(rng() % devices);
        const ExpertPlacement p = PlaceLongestFirst(cost, devices, fixed);
        for (int j = 0; j < jobs; ++j) {
          if (fixed[j] >= 0) {
            EXPECT_EQ(p.device[j], fixed[j]);
          }
          EXPECT_EQ(p.pinned[j], fixed[j] >= 0);
        }
        const double opt = BruteForceMakespan(cost, devices, fixed);
        ASSERT_LE(p.makespan(), (1.5 - 0.5 / devices) * opt * (1 + 1e-12))
            << "D=" << devices << " E=" << jobs << " rep " << rep;
        worst = std::max(worst, p.makespan() / opt);
        over_four_thirds += p.makespan() > 4.0 / 3.0 * opt * (1 + 1e-12);
        ++cases;
      }
    }
  }
  std::printf("LPT with pins: %d cases, worst greedy/optimal %.4f, %d over 4/3\n", cases, worst,
              over_four_thirds);
  // Not a theorem with pins (Lee's 3/2 is), but the placement's target: none
  // of these cases may exceed 4/3 of the optimum either.
  EXPECT_EQ(over_four_thirds, 0);
}

TEST(ExpertPlacementTest, ImbalanceIsMaxOverMean) {
  ExpertPlacement p;
  p.load = {3, 1, 2};
  EXPECT_DOUBLE_EQ(p.imbalance(), 1.5);
  p.load = {0, 0};
  EXPECT_DOUBLE_EQ(p.imbalance(), 1.0);
}

TEST(ExpertPlacementTest, HottestQuarterOfThePreviousStepIsPinnedWhereItRan) {
  ExpertPlacer placer(2, PlacementCostModel{/*upload_bytes_per_second=*/1e3,
                                            /*flops_per_second=*/1e3});
  const std::vector<int64_t> bytes(8, 1000), flops(8, 10);
  // First step: nothing to pin; every expert pays its upload (1 s) + rows * 10 ms.
  const std::vector<int64_t> rows1 = {40, 1, 1, 30, 1, 1, 0, 1};
  const ExpertPlacement first = placer.Place(rows1, bytes, flops);
  for (bool pinned : first.pinned) EXPECT_FALSE(pinned);
  EXPECT_DOUBLE_EQ(first.load[0] + first.load[1], 7 * 1.0 + 75 * 0.01);  // expert 6 idle
  // Second step: experts 0 and 3 (the hottest 2 of 8) stay where they ran and
  // upload nothing.
  const std::vector<int64_t> rows2 = {10, 10, 10, 10, 10, 10, 10, 10};
  const ExpertPlacement second = placer.Place(rows2, bytes, flops);
  for (int e = 0; e < 8; ++e) EXPECT_EQ(second.pinned[e], e == 0 || e == 3) << e;
  EXPECT_EQ(second.device[0], first.device[0]);
  EXPECT_EQ(second.device[3], first.device[3]);
  EXPECT_DOUBLE_EQ(second.load[0] + second.load[1], 6 * 1.0 + 80 * 0.01);
  EXPECT_LE(second.imbalance(), 4.0 / 3.0);
}

// With each expert's transfer by fate, the greedy and the modelled bytes
// count what the expert moves: through the slots, kept (this step's hottest
// quarter joins its device), or pinned (on its device from the last step).
TEST(ExpertPlacementTest, TransferByFateIsWhatTheModelCounts) {
  ExpertPlacer placer(2, PlacementCostModel{/*upload_bytes_per_second=*/1e3,
                                            /*flops_per_second=*/1e3});
  const std::vector<ExpertTransfer> transfer(8, ExpertTransfer{3000, 500, 2000});
  const std::vector<int64_t> flops(8, 10);
  const std::vector<int64_t> rows1 = {40, 1, 1, 30, 1, 1, 0, 1};
  const ExpertPlacement first = placer.Place(rows1, transfer, flops);
  EXPECT_EQ(first.kept, HottestQuarter(rows1));
  // Experts 0 and 3 join their devices (2000 each), five others use the slots.
  EXPECT_EQ(first.transfer_bytes, 2 * 2000 + 5 * 3000);
  EXPECT_DOUBLE_EQ(first.load[0] + first.load[1], 2 * 2.0 + 5 * 3.0 + 75 * 0.01);
  const std::vector<int64_t> rows2 = {10, 10, 10, 10, 50, 10, 60, 0};
  const ExpertPlacement second = placer.Place(rows2, transfer, flops);
  // 0 and 3 pinned (500 each); 4 and 6 the new hottest (2000 each); 1, 2, 5
  // through the slots; 7 idle.
  for (int e = 0; e < 8; ++e) EXPECT_EQ(second.pinned[e], e == 0 || e == 3) << e;
  for (int e = 0; e < 8; ++e) EXPECT_EQ(second.kept[e], e == 4 || e == 6) << e;
  EXPECT_EQ(second.transfer_bytes, 2 * 500 + 2 * 2000 + 3 * 3000);
}

TEST(ExpertPlacementTest, HottestQuarterSkipsIdleExperts) {
  EXPECT_EQ(HottestQuarter({0, 0, 0, 0, 0, 0, 0, 0}), std::vector<bool>(8, false));
  EXPECT_EQ(HottestQuarter({1, 5, 5, 0}), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(HottestQuarter({1, 2, 3}), std::vector<bool>(3, false));  // floor(3/4) = 0
}

}  // namespace
}  // namespace expertd::train
