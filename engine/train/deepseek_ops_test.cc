// DeepSeek-V3's training ops: MLA attention (expanded form), attention with
// a distinct value width and an explicit scale, YaRN rotary tables, and the
// grouped sigmoid router. Backward ops against central differences of their
// own forward, L = sum(forward(x) * R) for a fixed random R.
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "engine/train/mla_block.h"
#include "engine/train/moe_block.h"
#include "engine/train/ops.h"
#include "gtest/gtest.h"

namespace expertd::train {
namespace {

std::vector<float> Random(size_t n, std::mt19937* rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// max |fd - analytic| / max |analytic| over every element of *x.
double FdError(std::vector<float>* x, const std::vector<float>& analytic,
               const std::function<double()>& loss, float h = 1e-3f) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < x->size(); ++i) {
    const float saved = (*x)[i];
    (*x)[i] = saved + h;
    const double plus = loss();
    (*x)[i] = saved - h;
    const double minus = loss();
    (*x)[i] = saved;
    const double fd = (plus - minus) / (2.0 * h);
    max_diff = std::max(max_diff, std::fabs(fd - analytic[i]));
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(analytic[i])));
  }
  EXPECT_GT(max_ref, 0.0) << "the gradient is all zero: nothing was tested";
  return max_diff / max_ref;
}

constexpr double kFdTol = 1e-2;

Parameter MakeParam(std::vector<int64_t> shape, std::mt19937* rng, float scale) {
  Parameter p;
  p.shape = shape;
  p.value = Random(shape[0] * (shape.size() > 1 ? shape[1] : 1), rng, scale);
  return p;
}

TEST(DeepseekOpsFdTest, AttentionWithValueWidthAndScale) {
  std::mt19937 rng(21);
  AttentionShape s{2, 4, 3, 3, 6};
  s.v_dim = 4;
  s.scale = 0.37f;
  const int64_t n = s.batch * s.t;
  auto q = Random(n * s.q_heads * s.head_dim, &rng), k = Random(q.size(), &rng);
  auto v = Random(n * s.kv_heads * s.v_dim, &rng);
  const auto r = Random(n * s.q_heads * s.v_dim, &rng);
  std::vector<float> probs(s.batch * s.q_heads * s.t * s.t), out(r.size());
  auto loss = [&] {
    AttentionForward(s, q.data(), k.data(), v.data(), probs.data(), out.data(), nullptr);
    return Dot(out, r);
  };
  loss();
  std::vector<float> dq(q.size(), 0), dk(k.size(), 0), dv(v.size(), 0);
  AttentionBackward(s, q.data(), k.data(), v.data(), probs.data(), r.data(), dq.data(), dk.data(),
                    dv.data(), nullptr);
  EXPECT_LT(FdError(&q, dq, loss), kFdTol);
  EXPECT_LT(FdError(&k, dk, loss), kFdTol);
  EXPECT_LT(FdError(&v, dv, loss), kFdTol);
}

// cos/sin scaled by an attention factor: the backward is the transpose.
TEST(DeepseekOpsFdTest, RopeWithAttentionFactor) {
  std::mt19937 rng(22);
  const int64_t b = 2, t = 5, heads = 2;
  const RopeTables rope = MakeRopeTablesFromInvFreq(t, {1.0f, 0.3f, 0.05f}, 1.3f);
  auto x = Random(b * t * heads * 6, &rng);
  const auto r = Random(x.size(), &rng);
  auto loss = [&] {
    std::vector<float> y = x;
    RopeForward(rope, y.data(), b, t, heads);
    return Dot(y, r);
  };
  std::vector<float> dx = r;
  RopeBackward(rope, dx.data(), b, t, heads);
  EXPECT_LT(FdError(&x, dx, loss, 1e-2f), kFdTol);
}

models::ModelConfig YarnConfig() {
  models::ModelConfig c;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.rope_theta = 10000.0;
  c.rope_scaling.type = models::RopeScalingType::kYarn;
  c.rope_scaling.factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.rope_scaling.beta_fast = 32.0;
  c.rope_scaling.beta_slow = 1.0;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;
  return c;
}

// dim 8, theta 1e4, 64 original positions: the correction range is [0, 2],
// so pair 0 keeps its frequency, pair 1 is half-way, pairs 2-3 are / factor.
TEST(DeepseekRopeTest, YarnFrequenciesAndScales) {
  models::ModelConfig c = YarnConfig();
  auto rope = MakeMlaRopeTables(c, 3);
  ASSERT_TRUE(rope.ok()) << rope.status();
  ASSERT_EQ(rope->half, 4);
  const float p1 = std::pow(10000.0f, 0.25f), p3 = std::pow(10000.0f, 0.75f);
  const float inv1 = 0.5f * (1.0f / (4.0f * p1)) + 0.5f * (1.0f / p1);
  EXPECT_NEAR(rope->cos[2 * 4 + 0], std::cos(2.0f), 1e-6);
  EXPECT_NEAR(rope->sin[2 * 4 + 1], std::sin(2.0f * inv1), 1e-6);
  EXPECT_NEAR(rope->sin[2 * 4 + 3], std::sin(2.0f / (4.0f * p3)), 1e-6);
  EXPECT_NEAR(MlaSoftmaxScale(c), std::pow(1.0 + 0.1 * std::log(4.0), 2) / std::sqrt(24.0), 1e-7);
  // mscale_all_dim 0 (the reference's default): cos/sin carry mscale(4, 1).
  c.rope_scaling.mscale_all_dim = 0.0;
  rope = MakeMlaRopeTables(c, 1);
  ASSERT_TRUE(rope.ok());
  EXPECT_NEAR(rope->cos[0], 1.0 + 0.1 * std::log(4.0), 1e-6);
  EXPECT_NEAR(MlaSoftmaxScale(c), 1.0 / std::sqrt(24.0), 1e-7);
  c.rope_scaling.type = models::RopeScalingType::kLinear;
  EXPECT_EQ(MakeMlaRopeTables(c, 1).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(DeepseekOpsTest, GroupedSigmoidSelectsOnBiasedScoresInKeptGroups) {
  std::vector<Parameter> store(2);
  store[0].shape = {4, 1};
  store[1].value = {0.0f, 0.0f, 0.0f, 1.0f};
  FeedForwardParams p;
  p.router = &store[0];
  p.score_bias = &store[1];
  p.top_k = 1;
  p.n_group = 2;
  p.topk_group = 1;
  p.routed_scaling_factor = 2.0f;
  // Expert 0 has the best score, but expert 3's bias wins group 1 (0.27 + 1.62 > 0.88 +
  // 0.73) and then the pick.
  const std::vector<float> logits = {2.0f, 1.0f, -1.0f, 0.5f};
  std::vector<float> scores(4), w(1);
  std::vector<int32_t> ids(1);
  RouteGroupedSigmoid(p, logits.data(), 1, scores.data(), ids.data(), w.data());
  EXPECT_EQ(ids[0], 3);
  EXPECT_FLOAT_EQ(w[0], 2.0f / (1.0f + std::exp(-0.5f)));  // unbiased score, scaled
}

TEST(DeepseekOpsFdTest, GroupedSigmoidRouter) {
  for (bool normalize : {false, true}) {
    std::mt19937 rng(23);
    const int64_t n = 3, e = 8, k = 3;
    std::vector<Parameter> store(2);
    store[0].shape = {e, 1};
    store[1].value = Random(e, &rng, 0.1f);
    FeedForwardParams p;
    p.router = &store[0];
    p.score_bias = &store[1];
    p.top_k = k;
    p.n_group = 4;
    p.topk_group = 2;
    p.norm_topk_prob = normalize;
    p.routed_scaling_factor = 2.5f;
    // Well-separated logits so no perturbation flips a choice.
    std::vector<float> logits(n * e);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < e; ++i) logits[r * e + i] = 0.6f * ((i * 5 + r * 3) % e) - 2.0f;
    }
    const auto rw = Random(n * k, &rng);
    std::vector<float> scores(n * e), weight(n * k);
    std::vector<int32_t> ids(n * k);
    auto loss = [&] {
      RouteGroupedSigmoid(p, logits.data(), n, scores.data(), ids.data(), weight.data());
      return Dot(weight, rw);
    };
    loss();
    std::vector<float> dlogits(n * e, 0);
    RouteGroupedSigmoidBackward(p, scores.data(), ids.data(), rw.data(), n, dlogits.data());
    EXPECT_LT(FdError(&logits, dlogits, loss), kFdTol) << "normalize=" << normalize;
  }
}

// A DeepSeek MoE block: the bias gets no gradient, an expert no token chose
// gets none either, the router's gradient matches finite differences.
TEST(DeepseekOpsFdTest, SigmoidMoeBlock) {
  std::mt19937 rng(24);
  const int64_t n = 3, h = 6, f = 4, e = 8;
  std::vector<Parameter> store;
  store.reserve(3 * e + 5);
  auto add = [&](std::vector<int64_t> shape, float scale) {
    store.push_back(MakeParam(shape, &rng, scale));
    return &store.back();
  };
  FeedForwardParams p;
  p.moe = true;
  p.top_k = 2;
  p.norm_topk_prob = true;
  p.n_group = 2;
  p.topk_group = 1;
  p.routed_scaling_factor = 2.5f;
  p.idle_experts_skip_gradient = true;
  p.router = add({e, h}, 1.0f);
  p.score_bias = add({e}, 0.1f);
  for (int64_t i = 0; i < e; ++i) {
    p.experts.push_back(MlpParams{add({f, h}, 0.5f), add({f, h}, 0.5f), add({h, f}, 0.5f)});
  }
  p.shared = MlpParams{add({f, h}, 0.5f), add({f, h}, 0.5f), add({h, f}, 0.5f)};
  auto x = Random(n * h, &rng);
  const auto r = Random(n * h, &rng);
  InMemoryFeedForwardExecutor exec;
  FeedForwardActivations acts;
  std::vector<float> y(n * h);
  auto loss = [&] {
    EXPECT_TRUE(exec.Forward(p, x.data(), n, h, &acts, y.data(), nullptr).ok());
    return Dot(y, r);
  };
  loss();
  std::vector<float> dx(n * h, 0);
  ASSERT_TRUE(exec.Backward(p, x.data(), acts, r.data(), {}, n, h, dx.data(), nullptr).ok());
  EXPECT_FALSE(p.score_bias->has_grad);
  EXPECT_LT(FdError(&x, dx, loss), kFdTol);
  EXPECT_LT(FdError(&p.router->value, p.router->grad, loss), kFdTol);
  EXPECT_LT(FdError(&p.shared.up->value, p.shared.up->grad, loss), kFdTol);
  int idle = 0;
  for (int64_t i = 0; i < e; ++i) {
    if (acts.expert_rows[i].empty()) {
      ++idle;
      EXPECT_FALSE(p.experts[i].gate->has_grad) << i;
      continue;
    }
    EXPECT_LT(FdError(&p.experts[i].down->value, p.experts[i].down->grad, loss), kFdTol);
  }
  EXPECT_GT(idle, 0) << "3 tokens x top-2 over 8 experts leave some idle";
}

TEST(DeepseekOpsFdTest, MlaBlock) {
  for (int64_t q_lora : {6, 0}) {
    std::mt19937 rng(25);
    MlaDims d;
    d.batch = 2;
    d.t = 3;
    d.heads = 2;
    d.q_lora = q_lora;
    d.latent = 5;
    d.nope = 4;
    d.rope = 4;
    d.v = 3;
    d.scale = 0.4f;
    const int64_t hidden = 8, n = d.rows(), qw = d.heads * d.qk_dim();
    std::vector<Parameter> store;
    store.reserve(8);
    auto add = [&](std::vector<int64_t> shape, float scale) {
      store.push_back(MakeParam(shape, &rng, scale));
      return &store.back();
    };
    MlaParams p;
    if (q_lora > 0) {
      p.q_a = add({q_lora, hidden}, 0.5f);
      p.q_a_norm = add({q_lora}, 1.0f);
      p.q_b = add({qw, q_lora}, 0.5f);
    } else {
      p.q_proj = add({qw, hidden}, 0.5f);
    }
    p.kv_a = add({d.latent + d.rope, hidden}, 0.5f);
    p.kv_a_norm = add({d.latent}, 1.0f);
    p.kv_b = add({d.heads * (d.nope + d.v), d.latent}, 0.5f);
    p.o = add({hidden, d.heads * d.v}, 0.5f);
    const RopeTables rope = MakeRopeTablesFromInvFreq(d.t, {0.9f, 0.2f}, 1.1f);
    auto x = Random(n * hidden, &rng);
    const auto r = Random(n * hidden, &rng);
    MlaActivations acts;
    std::vector<float> out(n * hidden);
    auto loss = [&] {
      MlaForward(p, d, rope, x.data(), &acts, out.data(), nullptr);
      return Dot(out, r);
    };
    loss();
    std::vector<float> dx(x.size(), 0.0f);
    MlaBackward(p, d, rope, x.data(), acts, r.data(), dx.data(), nullptr);
    EXPECT_LT(FdError(&x, dx, loss), kFdTol) << q_lora;
    for (Parameter& w : store) EXPECT_LT(FdError(&w.value, w.grad, loss), kFdTol) << q_lora;
  }
}

}  // namespace
}  // namespace expertd::train
