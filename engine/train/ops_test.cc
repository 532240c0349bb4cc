// Finite-difference tests: every backward op against central differences of
// its own forward, L = sum(forward(x) * R) for a fixed random R.
#include "engine/train/ops.h"

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "engine/train/attention_block.h"
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

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// max |fd - analytic| / max |analytic| over every element of *x.
double FdError(std::vector<float>* x, const std::vector<float>& analytic,
               const std::function<double()>& loss, float h = 1e-2f) {
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

TEST(OpsFdTest, Linear) {
  std::mt19937 rng(1);
  const int64_t n = 3, in = 5, out = 4;
  auto x = Random(n * in, &rng), w = Random(out * in, &rng), b = Random(out, &rng);
  const auto r = Random(n * out, &rng);
  std::vector<float> y(n * out), dx(n * in, 0), dw(out * in, 0), db(out, 0);
  auto loss = [&] {
    LinearForward(x.data(), w.data(), b.data(), y.data(), n, in, out, nullptr);
    return Dot(y, r);
  };
  LinearBackward(x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data(), n, in, out,
                 nullptr);
  EXPECT_LT(FdError(&x, dx, loss), kFdTol);
  EXPECT_LT(FdError(&w, dw, loss), kFdTol);
  EXPECT_LT(FdError(&b, db, loss), kFdTol);
}

TEST(OpsFdTest, RmsNorm) {
  std::mt19937 rng(2);
  const int64_t n = 3, d = 8;
  auto x = Random(n * d, &rng), w = Random(d, &rng);
  const auto r = Random(n * d, &rng);
  std::vector<float> y(n * d), rstd(n), dx(n * d, 0), dw(d, 0);
  auto loss = [&] {
    RmsNormForward(x.data(), w.data(), 1e-5f, y.data(), rstd.data(), n, d, nullptr);
    return Dot(y, r);
  };
  loss();
  RmsNormBackward(x.data(), w.data(), rstd.data(), r.data(), dx.data(), dw.data(), n, d, nullptr);
  EXPECT_LT(FdError(&x, dx, loss), kFdTol);
  EXPECT_LT(FdError(&w, dw, loss), kFdTol);
}

TEST(OpsFdTest, Rope) {
  std::mt19937 rng(3);
  const int64_t b = 2, t = 5, heads = 2, dh = 8;
  const RopeTables rope = MakeRopeTables(t, dh, 10000.0);
  auto x = Random(b * t * heads * dh, &rng);
  const auto r = Random(x.size(), &rng);
  auto loss = [&] {
    std::vector<float> y = x;
    RopeForward(rope, y.data(), b, t, heads);
    return Dot(y, r);
  };
  std::vector<float> dx = r;
  RopeBackward(rope, dx.data(), b, t, heads);
  EXPECT_LT(FdError(&x, dx, loss), kFdTol);
}

TEST(OpsFdTest, CausalGqaAttention) {
  std::mt19937 rng(4);
  const AttentionShape s{2, 4, 4, 2, 8};
  const int64_t n = s.batch * s.t;
  auto q = Random(n * s.q_heads * s.head_dim, &rng), k = Random(n * s.kv_heads * s.head_dim, &rng);
  auto v = Random(k.size(), &rng);
  const auto r = Random(q.size(), &rng);
  std::vector<float> probs(s.batch * s.q_heads * s.t * s.t), out(q.size());
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

TEST(OpsFdTest, SwiGlu) {
  std::mt19937 rng(5);
  auto gate = Random(16, &rng, 2.0f), up = Random(16, &rng);
  const auto r = Random(16, &rng);
  std::vector<float> act(16), dgate(16), dup(16);
  auto loss = [&] {
    SwiGluForward(gate.data(), up.data(), act.data(), 16);
    return Dot(act, r);
  };
  SwiGluBackward(gate.data(), up.data(), r.data(), dgate.data(), dup.data(), 16);
  EXPECT_LT(FdError(&gate, dgate, loss), kFdTol);
  EXPECT_LT(FdError(&up, dup, loss), kFdTol);
}

TEST(OpsFdTest, CrossEntropyWithIgnoredRows) {
  std::mt19937 rng(6);
  const int64_t n = 4, v = 7;
  auto logits = Random(n * v, &rng, 2.0f);
  const std::vector<int32_t> targets = {3, -100, 0, 6};
  std::vector<float> dlogits(n * v);
  auto loss = [&] {
    return CrossEntropy(logits.data(), targets.data(), n, v, 1.0f, nullptr, nullptr);
  };
  CrossEntropy(logits.data(), targets.data(), n, v, 1.0f, dlogits.data(), nullptr);
  EXPECT_LT(FdError(&logits, dlogits, loss), kFdTol);
  for (int64_t c = 0; c < v; ++c) EXPECT_EQ(dlogits[v + c], 0.0f);  // the ignored row
}

// Router: softmax -> top-k -> (renormalised) weights, for both settings.
TEST(OpsFdTest, RouterTopK) {
  for (bool normalize : {false, true}) {
    std::mt19937 rng(7);
    const int64_t n = 3, e = 6, k = 2;
    // Well-separated logits so no perturbation flips a choice.
    std::vector<float> logits(n * e);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < e; ++i) logits[r * e + i] = 0.7f * ((i * 5 + r * 3) % e);
    }
    const auto rw = Random(n * k, &rng);
    std::vector<float> probs(n * e), weight(n * k);
    std::vector<int32_t> ids(n * k);
    auto loss = [&] {
      RouteTopK(logits.data(), n, e, k, normalize, probs.data(), ids.data(), weight.data());
      return Dot(weight, rw);
    };
    loss();
    std::vector<float> dprobs(n * e, 0), dlogits(n * e, 0);
    RouteTopKBackward(probs.data(), ids.data(), weight.data(), rw.data(), n, e, k, normalize,
                      dprobs.data());
    SoftmaxBackward(probs.data(), dprobs.data(), dlogits.data(), n, e);
    EXPECT_LT(FdError(&logits, dlogits, loss, 1e-3f), kFdTol) << "normalize=" << normalize;
  }
}

Parameter MakeParam(std::vector<int64_t> shape, std::mt19937* rng, float scale) {
  Parameter p;
  p.shape = shape;
  p.value = Random(shape[0] * (shape.size() > 1 ? shape[1] : 1), rng, scale);
  return p;
}

// A whole MoE block (router, routed experts, shared expert with its sigmoid
// gate) plus a linear auxiliary term on the router probabilities.
TEST(OpsFdTest, MoeBlock) {
  std::mt19937 rng(8);
  const int64_t n = 5, h = 6, f = 4, e = 4;
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
  p.router = add({e, h}, 1.0f);
  for (int64_t i = 0; i < e; ++i) {
    p.experts.push_back(MlpParams{add({f, h}, 0.5f), add({f, h}, 0.5f), add({h, f}, 0.5f)});
  }
  p.shared = MlpParams{add({f, h}, 0.5f), add({f, h}, 0.5f), add({h, f}, 0.5f)};
  p.shared_gate = add({1, h}, 0.5f);
  auto x = Random(n * h, &rng);
  const auto r = Random(n * h, &rng);
  const std::vector<float> aux_dprob = {0.3f, -0.2f, 0.1f, 0.05f};
  InMemoryFeedForwardExecutor exec;
  FeedForwardActivations acts;
  std::vector<float> y(n * h);
  auto loss = [&] {
    exec.Forward(p, x.data(), n, h, &acts, y.data(), nullptr);
    double aux = 0;
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t i = 0; i < e; ++i) aux += aux_dprob[i] * acts.probs[row * e + i];
    }
    return Dot(y, r) + aux;
  };
  loss();
  std::vector<float> dx(n * h, 0);
  exec.Backward(p, x.data(), acts, r.data(), aux_dprob, n, h, dx.data(), nullptr);
  EXPECT_LT(FdError(&x, dx, loss, 1e-3f), kFdTol);
  EXPECT_LT(FdError(&p.router->value, p.router->grad, loss, 1e-3f), kFdTol);
  EXPECT_LT(FdError(&p.shared_gate->value, p.shared_gate->grad, loss, 1e-3f), kFdTol);
  EXPECT_LT(FdError(&p.shared.down->value, p.shared.down->grad, loss, 1e-3f), kFdTol);
  for (int64_t i = 0; i < e; ++i) {
    ASSERT_TRUE(p.experts[i].gate->has_grad);
    if (acts.expert_rows[i].empty()) continue;  // zero gradient, nothing to difference
    EXPECT_LT(FdError(&p.experts[i].gate->value, p.experts[i].gate->grad, loss, 1e-3f), kFdTol);
    EXPECT_LT(FdError(&p.experts[i].up->value, p.experts[i].up->grad, loss, 1e-3f), kFdTol);
  }
}

// The attention block with OLMoE's whole-projection q/k norm and clip_qkv,
// and with Qwen3-MoE's per-head norm.
TEST(OpsFdTest, AttentionBlockWithQkNormAndClip) {
  for (models::QkNorm norm : {models::QkNorm::kWholeProjection, models::QkNorm::kPerHead}) {
    std::mt19937 rng(12);
    const AttentionDims d{
        1, 4, 8, 2, 1, 4, norm, 1e-5f, norm == models::QkNorm::kWholeProjection ? 1.2f : 0.0f};
    std::vector<Parameter> store;
    store.reserve(6);
    auto add = [&](std::vector<int64_t> shape, float scale) {
      store.push_back(MakeParam(shape, &rng, scale));
      return &store.back();
    };
    AttentionParams p;
    p.q = add({8, 8}, 0.5f);
    p.k = add({4, 8}, 0.5f);
    p.v = add({4, 8}, 0.5f);
    p.o = add({8, 8}, 0.5f);
    const int64_t norm_dim = norm == models::QkNorm::kPerHead ? 4 : 0;
    p.q_norm = add({norm_dim > 0 ? norm_dim : 8}, 1.0f);
    p.k_norm = add({norm_dim > 0 ? norm_dim : 4}, 1.0f);
    const RopeTables rope = MakeRopeTables(4, 4, 10000.0);
    auto x = Random(4 * 8, &rng);
    const auto r = Random(4 * 8, &rng);
    AttentionActivations acts;
    std::vector<float> out(4 * 8);
    auto loss = [&] {
      AttentionBlockForward(p, d, rope, x.data(), &acts, out.data(), nullptr);
      return Dot(out, r);
    };
    loss();
    std::vector<float> dx(x.size(), 0.0f);
    AttentionBlockBackward(p, d, rope, x.data(), acts, r.data(), dx.data(), nullptr);
    EXPECT_LT(FdError(&x, dx, loss, 1e-3f), kFdTol);
    EXPECT_LT(FdError(&p.q->value, p.q->grad, loss, 1e-3f), kFdTol);
    EXPECT_LT(FdError(&p.k_norm->value, p.k_norm->grad, loss, 1e-3f), kFdTol);
    EXPECT_LT(FdError(&p.v->value, p.v->grad, loss, 1e-3f), kFdTol);
  }
}

// The thread pool splits outputs only: any thread count gives the same bits.
TEST(OpsTest, LinearBackwardIsThreadCountInvariant) {
  std::mt19937 rng(9);
  const int64_t n = 17, in = 33, out = 29;
  auto x = Random(n * in, &rng), w = Random(out * in, &rng), dy = Random(n * out, &rng);
  std::vector<float> dx1(n * in, 0), dw1(out * in, 0), dx4(n * in, 0), dw4(out * in, 0);
  LinearBackward(x.data(), w.data(), dy.data(), dx1.data(), dw1.data(), nullptr, n, in, out,
                 nullptr);
  engine::ThreadPool pool(4);
  LinearBackward(x.data(), w.data(), dy.data(), dx4.data(), dw4.data(), nullptr, n, in, out, &pool);
  EXPECT_EQ(dx1, dx4);
  EXPECT_EQ(dw1, dw4);
}

// Embedding backward is exact: a token's rows summed, the padding row
// untouched (nn.Embedding(padding_idx)), other rows untouched.
TEST(OpsTest, EmbeddingBackwardSumsRowsAndSkipsThePaddingRow) {
  const int64_t d = 3;
  const std::vector<int32_t> ids = {2, 0, 2, 1, 0};  // 0 is padding
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6, 0.5f, 0.25f, 0.125f, 7, 8, 9, 10, 11, 12};
  std::vector<float> table(4 * d, 1.0f);
  EmbeddingBackward(ids.data(), dy.data(), 5, d, /*padding_idx=*/0, table.data());
  EXPECT_EQ(table, (std::vector<float>{1, 1, 1, 8, 9, 10, 2.5f, 3.25f, 4.125f, 1, 1, 1}));
  std::vector<float> no_padding(4 * d, 0.0f);
  EmbeddingBackward(ids.data(), dy.data(), 5, d, /*padding_idx=*/-1, no_padding.data());
  EXPECT_EQ(no_padding[0], 4.0f + 10.0f);
}

TEST(OpsTest, CrossEntropyRowsSumToCrossEntropy) {
  std::mt19937 rng(10);
  const int64_t n = 5, v = 11;
  auto logits = Random(n * v, &rng, 2.0f);
  const std::vector<int32_t> targets = {3, -100, 0, 10, -100};
  std::vector<double> rows(n, -1.0);
  std::vector<float> d1(n * v), d2(n * v);
  CrossEntropyRows(logits.data(), targets.data(), n, v, 0.5f, d1.data(), rows.data(), nullptr);
  const double total = CrossEntropy(logits.data(), targets.data(), n, v, 0.5f, d2.data(), nullptr);
  EXPECT_EQ(rows[1], 0.0);
  EXPECT_EQ(rows[4], 0.0);
  EXPECT_GT(rows[0], 0.0);
  EXPECT_EQ(rows[0] + rows[1] + rows[2] + rows[3] + rows[4], total);
  EXPECT_EQ(d1, d2);
}

// The pointer form of RopeBackward is the tables form.
TEST(OpsTest, RopeBackwardFromArraysEqualsTables) {
  std::mt19937 rng(11);
  const RopeTables rope = MakeRopeTables(6, 8, 10000.0);
  auto a = Random(2 * 6 * 3 * 8, &rng);
  auto b = a;
  RopeBackward(rope, a.data(), 2, 6, 3);
  RopeBackward(rope.cos.data(), rope.sin.data(), rope.half, b.data(), 2, 6, 3);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace expertd::train
