#include "engine/experts/compute_cost_model.h"

#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

// A GPU-like machine: a 1 MB expert pages in 1 ms; the host computes an
// expert in 0.5 ms + 0.2 ms per token, the device in 0.05 ms + 0.001 ms per token.
ComputeRates GpuLikeRates() {
  ComputeRates r;
  r.page_bytes_per_s = 1e9;
  r.host = LinearCost{0.5e-3, 0.2e-3};
  r.device = LinearCost{0.05e-3, 0.001e-3};
  return r;
}
constexpr uint64_t kExpertBytes = 1000000;
constexpr int64_t kHidden = 1024;

std::vector<ExpertDemand> Missed(int experts, int64_t tokens) {
  std::vector<ExpertDemand> d;
  for (int e = 0; e < experts; ++e) d.push_back({e, tokens, false});
  return d;
}

TEST(ComputeCostModelTest, ParsesModeNames) {
  ExpertComputeMode m;
  for (const char* name : {"auto", "device", "host"}) {
    ASSERT_TRUE(ParseExpertComputeMode(name, &m));
    EXPECT_STREQ(ExpertComputeModeName(m), name);
  }
  EXPECT_FALSE(ParseExpertComputeMode("cpu", &m));
}

TEST(ComputeCostModelTest, FitsALineThroughTwoMeasurements) {
  const LinearCost c = LinearCost::Fit(1, 1.2e-3, 65, 7.6e-3);
  EXPECT_NEAR(c.per_token_s, 0.1e-3, 1e-12);
  EXPECT_NEAR(c.fixed_s, 1.1e-3, 1e-12);
  const LinearCost flat = LinearCost::Fit(1, 2e-3, 64, 1e-3);  // noise: never negative
  EXPECT_EQ(flat.per_token_s, 0);
  EXPECT_EQ(flat.fixed_s, 2e-3);
}

TEST(ComputeCostModelTest, DecodeGoesToTheHostPrefillIsPaged) {
  ComputeCostModel model(ExpertComputeMode::kAuto, GpuLikeRates(), kExpertBytes, kHidden);
  // One token per expert: host 0.7 ms vs page 1 ms + device 0.05 ms.
  const ComputePlan decode = model.Plan(Missed(1, 1));
  EXPECT_EQ(decode.host, std::vector<int32_t>({0}));
  // 512 tokens: host 103 ms vs 1.6 ms paged.
  const ComputePlan prefill = model.Plan(Missed(1, 512));
  EXPECT_TRUE(prefill.host.empty());
  EXPECT_NEAR(prefill.predicted_s(), 1e-3 + 0.05e-3 + 0.512e-3, 1e-9);
}

TEST(ComputeCostModelTest, AutoBalancesBothSidesOfTheOverlap) {
  ComputeCostModel model(ExpertComputeMode::kAuto, GpuLikeRates(), kExpertBytes, kHidden);
  // Four missed decode experts: the host alone would take 4 x 0.7 ms; the
  // plan splits them so both sides finish about together.
  const ComputePlan plan = model.Plan(Missed(4, 1));
  EXPECT_EQ(plan.host.size(), 2u);
  EXPECT_LT(plan.predicted_s(), 4 * 0.7e-3);
  EXPECT_NEAR(plan.device_s, 2 * (1e-3 + 0.051e-3), 1e-9);
  // Resident experts keep the device busy, so more misses go to the host.
  std::vector<ExpertDemand> busy = Missed(4, 1);
  for (int e = 4; e < 40; ++e) busy.push_back({e, 40, true});
  EXPECT_GT(model.Plan(busy).host.size(), plan.host.size());
}

TEST(ComputeCostModelTest, SharedHardwareAddsTheSidesInsteadOfOverlapping) {
  // The CPU backend: host and "device" are the same cores, so nothing
  // overlaps and each missed expert simply goes where it costs less.
  ComputeCostModel model(ExpertComputeMode::kAuto, GpuLikeRates(), kExpertBytes, kHidden,
                         /*overlap=*/false);
  const ComputePlan plan = model.Plan(Missed(4, 1));
  EXPECT_EQ(plan.host.size(), 4u);
  EXPECT_NEAR(plan.predicted_s(), plan.device_s + plan.host_s, 1e-12);
  EXPECT_TRUE(model.Plan(Missed(2, 512)).host.empty());
}

TEST(ComputeCostModelTest, SmallExpertsAreCheaperToPageEvenInDecode) {
  ComputeRates r = GpuLikeRates();
  r.page_bytes_per_s = 100e9;  // a 10 us page: paging beats 0.7 ms on the host
  ComputeCostModel model(ExpertComputeMode::kAuto, r, kExpertBytes, kHidden);
  EXPECT_TRUE(model.Plan(Missed(3, 1)).host.empty());
}

TEST(ComputeCostModelTest, FixedModesIgnoreTheRates) {
  ComputeCostModel host(ExpertComputeMode::kHost, GpuLikeRates(), kExpertBytes, kHidden);
  ComputeCostModel device(ExpertComputeMode::kDevice, GpuLikeRates(), kExpertBytes, kHidden);
  std::vector<ExpertDemand> d = Missed(3, 512);
  d.push_back({7, 1, true});  // resident: never computed on the host
  EXPECT_EQ(host.Plan(d).host, std::vector<int32_t>({0, 1, 2}));
  EXPECT_TRUE(device.Plan(Missed(3, 1)).host.empty());
  // Predictions are still made (they are reported per mode).
  EXPECT_GT(device.Plan(Missed(3, 1)).predicted_s(), 0);
}

TEST(ComputeCostModelTest, HostListIsAscendingWhateverTheTokenOrder) {
  ComputeCostModel model(ExpertComputeMode::kHost, GpuLikeRates(), kExpertBytes, kHidden);
  const std::vector<ExpertDemand> d = {{9, 3, false}, {2, 1, false}, {5, 2, false}};
  EXPECT_EQ(model.Plan(d).host, std::vector<int32_t>({2, 5, 9}));
}

TEST(ComputeCostModelTest, MeasurementsRefineTheRates) {
  ComputeCostModel model(ExpertComputeMode::kAuto, GpuLikeRates(), kExpertBytes, kHidden);
  ASSERT_EQ(model.Plan(Missed(1, 1)).host.size(), 1u);
  // The host turns out 4x slower than calibrated (another job took its
  // cores): after a few jobs a decode expert is paged instead.
  for (int i = 0; i < 20; ++i) model.ObserveHost(1, 4 * 0.7e-3);
  EXPECT_NEAR(model.rates().host.At(1), 4 * 0.7e-3, 0.1e-3);
  EXPECT_TRUE(model.Plan(Missed(1, 1)).host.empty());
  // Pages slow down 10x: back to the host.
  for (int i = 0; i < 30; ++i) model.ObservePage(kExpertBytes, 10e-3);
  EXPECT_NEAR(model.rates().page_bytes_per_s, 1e8, 1e7);
  EXPECT_EQ(model.Plan(Missed(1, 1)).host.size(), 1u);
  // The device speeds up on large jobs: its per-token cost follows.
  for (int i = 0; i < 30; ++i) model.ObserveDevice(100, 0.075e-3);
  EXPECT_NEAR(model.rates().device.At(100), 0.075e-3, 0.01e-3);
  // Broken samples are ignored.
  model.ObserveHost(1, 0);
  model.ObservePage(0, 1);
  EXPECT_NEAR(model.rates().page_bytes_per_s, 1e8, 1e7);
}

}  // namespace
}  // namespace expertd::engine
