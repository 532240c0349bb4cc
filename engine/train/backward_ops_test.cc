// CpuBackwardOps, the reference side of the backward seam: the router's
// composed backward (top-k renormalisation + load-balancing gradient +
// softmax) against finite differences of its forward, and the AdamW update's
// stored-weight rounding. The per-op CPU functions have their own
// finite-difference tests (ops_test.cc).
#include "engine/train/backward_ops.h"

#include <cmath>
#include <random>
#include <vector>

#include "engine/train/moe_block.h"
#include "gtest/gtest.h"

namespace expertd::train {
namespace {

std::vector<float> Random(size_t n, std::mt19937* rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

TEST(CpuBackwardOpsTest, RouterBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(1);
  const int64_t n = 3, e = 6, k = 2;
  for (bool normalize : {false, true}) {
    auto logits = Random(n * e, &rng, 2.0f);
    const auto r = Random(n * k, &rng), aux = Random(e, &rng);
    // L = sum_rk R_rk w_rk + sum_re aux_e p_re, with the selection held fixed.
    std::vector<float> probs(n * e), w(n * k);
    std::vector<int32_t> ids(n * k);
    RouteTopK(logits.data(), n, e, k, normalize, probs.data(), ids.data(), w.data());
    const std::vector<int32_t> chosen = ids;
    auto loss = [&] {
      std::vector<float> p(n * e), wt(n * k);
      std::vector<int32_t> id(n * k);
      RouteTopK(logits.data(), n, e, k, normalize, p.data(), id.data(), wt.data());
      EXPECT_EQ(id, chosen);  // the step stays away from a change of selection
      double l = 0;
      for (int64_t i = 0; i < n * k; ++i) l += static_cast<double>(r[i]) * wt[i];
      for (int64_t i = 0; i < n * e; ++i) l += static_cast<double>(aux[i % e]) * p[i];
      return l;
    };
    std::vector<float> dlogits(n * e, 0.0f);
    CpuBackwardOps ops(nullptr);
    ops.RouterBackward(probs.data(), ids.data(), w.data(), r.data(), aux.data(), n, e, k, normalize,
                       dlogits.data());
    ASSERT_TRUE(ops.Synchronize().ok());
    double max_diff = 0, max_ref = 0;
    const float h = 1e-3f;
    for (int64_t i = 0; i < n * e; ++i) {
      const float saved = logits[i];
      logits[i] = saved + h;
      const double plus = loss();
      logits[i] = saved - h;
      const double minus = loss();
      logits[i] = saved;
      max_diff = std::max(max_diff, std::fabs((plus - minus) / (2 * h) - dlogits[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(dlogits[i])));
    }
    EXPECT_LT(max_diff / max_ref, 2e-2) << "normalize " << normalize;
  }
}

// The seam's settings reach RouteGroupedSigmoidBackward unchanged.
TEST(CpuBackwardOpsTest, GroupedSigmoidRouterBackwardIsTheCpuFunction) {
  std::mt19937 rng(3);
  const int64_t n = 5, e = 8, k = 3;
  std::vector<Parameter> store(2);
  store[0].shape = {e, 1};
  store[1].value = Random(e, &rng, 0.1f);
  FeedForwardParams p;
  p.router = &store[0];
  p.score_bias = &store[1];
  p.top_k = k;
  p.n_group = 4;
  p.topk_group = 2;
  p.norm_topk_prob = true;
  p.routed_scaling_factor = 2.5f;
  const auto logits = Random(n * e, &rng, 2.0f), dweight = Random(n * k, &rng);
  std::vector<float> scores(n * e), weight(n * k), want(n * e, 0.5f), got(n * e, 0.5f);
  std::vector<int32_t> ids(n * k);
  RouteGroupedSigmoid(p, logits.data(), n, scores.data(), ids.data(), weight.data());
  RouteGroupedSigmoidBackward(p, scores.data(), ids.data(), dweight.data(), n, want.data());
  CpuBackwardOps ops(nullptr);
  ops.GroupedSigmoidRouterBackward(scores.data(), ids.data(), dweight.data(), n, e, k, true, 2.5f,
                                   got.data());
  EXPECT_EQ(got, want);
  EXPECT_NE(got, std::vector<float>(n * e, 0.5f));
}

TEST(CpuBackwardOpsTest, AdamWUpdateWritesTheMasterRoundedToTheWeightDtype) {
  std::mt19937 rng(2);
  const int64_t n = 37;
  const auto g = Random(n, &rng), p0 = Random(n, &rng);
  const AdamWConstants c = MakeAdamWConstants(AdamWOptions{}, 1e-2, 3);
  std::vector<float> p = p0, m(n, 0.0f), v(n, 0.0f);
  std::vector<float> want_p = p0, want_m(n, 0.0f), want_v(n, 0.0f);
  AdamWUpdateScalar(c, g.data(), want_p.data(), want_m.data(), want_v.data(), n);
  std::vector<uint16_t> weight(n), want_weight(n);
  models::ConvertFromF32(models::DType::kBF16, want_p.data(), want_weight.data(), n);
  CpuBackwardOps ops(nullptr);
  ops.AdamWUpdate(c, g.data(), p.data(), m.data(), v.data(), n, models::DType::kBF16,
                  weight.data());
  EXPECT_EQ(p, want_p);
  EXPECT_EQ(m, want_m);
  EXPECT_EQ(v, want_v);
  EXPECT_EQ(weight, want_weight);
  std::vector<float> f32_weight(n);
  std::vector<float> p2 = p0, m2(n, 0.0f), v2(n, 0.0f);
  ops.AdamWUpdate(c, g.data(), p2.data(), m2.data(), v2.data(), n, models::DType::kF32,
                  f32_weight.data());
  EXPECT_EQ(f32_weight, want_p);
}

}  // namespace
}  // namespace expertd::train
