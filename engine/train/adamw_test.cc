#include "engine/train/adamw.h"

#include <cmath>
#include <random>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/train/trainer.h"
#include "gtest/gtest.h"
#include "models/dtype/dtype.h"

namespace expertd::train {
namespace {

// The AVX2 update is the scalar reference, bit for bit (tails included).
TEST(AdamWTest, Avx2MatchesScalarBitwise) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (int64_t n : {1, 7, 8, 9, 1000, 1003}) {
    std::vector<float> g(n), p(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      g[i] = dist(rng);
      p[i] = dist(rng);
      m[i] = dist(rng) * 0.1f;
      v[i] = std::fabs(dist(rng)) * 0.01f;
    }
    std::vector<float> p2 = p, m2 = m, v2 = v;
    const AdamWConstants c = MakeAdamWConstants(AdamWOptions{}, 1e-3, 3);
    AdamWUpdateScalar(c, g.data(), p.data(), m.data(), v.data(), n);
    AdamWUpdateAvx2(c, g.data(), p2.data(), m2.data(), v2.data(), n);
    EXPECT_EQ(p, p2) << n;
    EXPECT_EQ(m, m2) << n;
    EXPECT_EQ(v, v2) << n;
  }
}

// So is the AVX-512 update, where the CPU has it.
TEST(AdamWTest, Avx512MatchesScalarBitwise) {
  if (!engine::cpu::CpuSupports(engine::cpu::CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(2);
  std::normal_distribution<float> dist;
  for (int64_t n : {1, 15, 16, 17, 1000, 1009}) {
    std::vector<float> g(n), p(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      g[i] = dist(rng);
      p[i] = dist(rng);
      m[i] = dist(rng) * 0.1f;
      v[i] = std::fabs(dist(rng)) * 0.01f;
    }
    std::vector<float> p2 = p, m2 = m, v2 = v;
    const AdamWConstants c = MakeAdamWConstants(AdamWOptions{}, 1e-3, 5);
    AdamWUpdateScalar(c, g.data(), p.data(), m.data(), v.data(), n);
    AdamWUpdateAvx512(c, g.data(), p2.data(), m2.data(), v2.data(), n);
    EXPECT_EQ(p, p2) << n;
    EXPECT_EQ(m, m2) << n;
    EXPECT_EQ(v, v2) << n;
  }
}

// torch.optim.AdamW's first step, computed by hand in double.
TEST(AdamWTest, FirstStepMatchesTheFormula) {
  const double lr = 1e-2, wd = 0.1, g = 0.5, p0 = 2.0;
  Parameter p;
  p.value = {static_cast<float>(p0)};
  p.grad = {static_cast<float>(g)};
  p.has_grad = true;
  std::vector<Parameter> params = {p};
  AdamW opt(AdamWOptions{0.9, 0.999, 1e-8, wd});
  opt.Step(&params, lr, nullptr);
  const double m = 0.1 * g, v = 0.001 * g * g;
  const double expected =
      p0 * (1 - lr * wd) - (lr / 0.1) * m / (std::sqrt(v) / std::sqrt(0.001) + 1e-8);
  EXPECT_NEAR(params[0].value[0], expected, 1e-6);
  EXPECT_EQ(opt.state()[0].step, 1);
}

// No gradient in a step: no decay, no moments, the step count stays.
TEST(AdamWTest, ParameterWithoutGradientIsSkipped) {
  Parameter a, b;
  a.value = b.value = {1.0f, -1.0f};
  a.grad = {0.1f, 0.2f};
  a.has_grad = true;
  std::vector<Parameter> params = {a, b};
  AdamW opt(AdamWOptions{});
  opt.Step(&params, 1e-3, nullptr);
  EXPECT_EQ(params[1].value, (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(opt.state()[1].step, 0);
  EXPECT_TRUE(opt.state()[1].m.empty());
  EXPECT_NE(params[0].value, (std::vector<float>{1.0f, -1.0f}));
  EXPECT_EQ(opt.state()[0].step, 1);
}

// A bf16 weight: the update runs on an fp32 master; the weight is the master
// rounded. Many small steps move it although each is below bf16 resolution.
TEST(AdamWTest, Bf16WeightsKeepAnFp32Master) {
  Parameter p;
  p.dtype = models::DType::kBF16;
  p.value = {1.0f};
  p.grad = {1.0f};
  p.has_grad = true;
  std::vector<Parameter> params = {p};
  AdamW opt(AdamWOptions{0.9, 0.999, 1e-8, 0.0});
  opt.Step(&params, 1e-4, nullptr);
  EXPECT_EQ(params[0].value[0], 1.0f);  // 0.9999 rounds back to 1 in bf16
  for (int i = 1; i < 100; ++i) opt.Step(&params, 1e-4, nullptr);
  const float master = opt.state()[0].master[0];
  EXPECT_NEAR(master, 1.0f - 100 * 1e-4f, 1e-5);
  EXPECT_EQ(params[0].value[0], models::Bf16ToF32(models::F32ToBf16(master)));
  EXPECT_LT(params[0].value[0], 1.0f);
}

TEST(ScheduleTest, WarmupThenDecay) {
  TrainOptions o;
  o.lr = 1.0;
  o.warmup_steps = 4;
  o.total_steps = 14;
  o.schedule = LrSchedule::kLinear;
  EXPECT_DOUBLE_EQ(ScheduledLr(o, 0), 0.0);
  EXPECT_DOUBLE_EQ(ScheduledLr(o, 2), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLr(o, 4), 1.0);
  EXPECT_DOUBLE_EQ(ScheduledLr(o, 9), 0.5);
  EXPECT_DOUBLE_EQ(ScheduledLr(o, 14), 0.0);
  o.schedule = LrSchedule::kCosine;
  EXPECT_NEAR(ScheduledLr(o, 9), 0.5, 1e-12);
  EXPECT_NEAR(ScheduledLr(o, 14), 0.0, 1e-12);
  o.schedule = LrSchedule::kConstant;
  EXPECT_DOUBLE_EQ(ScheduledLr(o, 13), 1.0);
}

}  // namespace
}  // namespace expertd::train
