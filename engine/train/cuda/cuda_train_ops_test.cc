// The training engine's CUDA kernels, through CudaBackwardOps, against their
// CPU twins (engine/train/ops.h, moe_block.h, adamw.h) on random inputs with
// odd sizes; outputs that are written (not accumulated) are poisoned with NaN
// first, accumulated ones start from random values. Agreement asserted:
//   bitwise: RMSNorm weight grad, RoPE, embedding, both routers, attention dv,
//            AdamW (p, m, v and the bf16/fp16/fp32 weight)
//   < 1e-6:  SwiGLU (expf within 2 ulp), cross-entropy dlogits; row losses 1e-12
//   < 1e-5:  RMSNorm dx, attention dq and dk (dot products in another order)
// (relative: max |gpu - cpu| / max |cpu| over the tensor). Skips without a GPU.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cuda/cuda_test_util.h"
#include "engine/train/adamw.h"
#include "engine/train/cuda/cuda_backward_ops.h"
#include "engine/train/moe_block.h"
#include "engine/train/ops.h"
#include "gtest/gtest.h"
#include "models/dtype/dtype.h"

namespace expertd::train {
namespace {

using engine::cuda_test::BitwiseEqual;
using engine::cuda_test::DeviceArray;
using engine::cuda_test::RelError;
using engine::cuda_test::SharedBackend;
using engine::reference::RandomVector;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

cuda::CudaBackwardOps Ops() { return cuda::CudaBackwardOps(SharedBackend()->compute_stream()); }

TEST(CudaTrainOpsTest, RmsNormBackward) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(1);
  for (int64_t d : {5, 300, 1031}) {
    const int64_t n = 37;
    auto x = RandomVector(n * d, &rng), w = RandomVector(d, &rng), dy = RandomVector(n * d, &rng);
    std::vector<float> y(n * d), rstd(n);
    RmsNormForward(x.data(), w.data(), 1e-6f, y.data(), rstd.data(), n, d, nullptr);
    const auto dx0 = RandomVector(n * d, &rng), dw0 = RandomVector(d, &rng);
    std::vector<float> dx = dx0, dw = dw0;
    RmsNormBackward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), n, d,
                    nullptr);
    DeviceArray<float> gx(x), gw(w), grstd(rstd), gdy(dy), gdx(dx0), gdw(dw0), gdx2(dx0);
    auto ops = Ops();
    ops.RmsNormBackward(gx.get(), gw.get(), grstd.get(), gdy.get(), gdx.get(), gdw.get(), n, d);
    ops.RmsNormBackward(gx.get(), gw.get(), grstd.get(), gdy.get(), gdx2.get(), nullptr, n, d);
    ASSERT_TRUE(ops.Synchronize().ok());
    EXPECT_LT(RelError(gdx.ToHost(), dx), 1e-5) << "d " << d;
    EXPECT_TRUE(BitwiseEqual(gdx2.ToHost(), gdx.ToHost())) << "d " << d;
    EXPECT_TRUE(BitwiseEqual(gdw.ToHost(), dw)) << "d " << d;
  }
}

TEST(CudaTrainOpsTest, SwiGluBackward) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(2);
  const int64_t count = 10007;
  auto gate = RandomVector(count, &rng, 8.0f), up = RandomVector(count, &rng);
  auto dact = RandomVector(count, &rng);
  std::vector<float> dgate(count), dup(count);
  SwiGluBackward(gate.data(), up.data(), dact.data(), dgate.data(), dup.data(), count);
  DeviceArray<float> gg(gate), gu(up), gd(dact), gdg(count, kNaN), gdu(count, kNaN);
  auto ops = Ops();
  ops.SwiGluBackward(gg.get(), gu.get(), gd.get(), gdg.get(), gdu.get(), count);
  ASSERT_TRUE(ops.Synchronize().ok());
  EXPECT_LT(RelError(gdg.ToHost(), dgate), 1e-6);
  EXPECT_LT(RelError(gdu.ToHost(), dup), 1e-6);
}

TEST(CudaTrainOpsTest, RopeBackwardIsBitwiseTheCpus) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(3);
  const int64_t batch = 3, t = 17, heads = 5;
  std::vector<float> inv_freq(32);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = std::pow(10000.0f, -static_cast<float>(i) / 32.0f);
  }
  for (const RopeTables& rope :
       {MakeRopeTables(t, 64, 10000.0), MakeRopeTablesFromInvFreq(t, inv_freq, 1.3f)}) {
    const auto x = RandomVector(batch * t * heads * 2 * rope.half, &rng);
    std::vector<float> dx = x;
    RopeBackward(rope, dx.data(), batch, t, heads);
    DeviceArray<float> gcos(rope.cos), gsin(rope.sin), gdx(x);
    auto ops = Ops();
    ops.RopeBackward(gcos.get(), gsin.get(), rope.half, gdx.get(), batch, t, heads);
    ASSERT_TRUE(ops.Synchronize().ok());
    EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), dx));
  }
}

TEST(CudaTrainOpsTest, EmbeddingBackwardIsBitwiseTheCpus) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(4);
  const int64_t vocab = 50, d = 67, n = 200;
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = token(rng);  // repeats: rows summed in token order
  ids[7] = ids[9] = 3;
  const auto dy = RandomVector(n * d, &rng), table0 = RandomVector(vocab * d, &rng);
  for (int32_t padding : {3, -1}) {
    std::vector<float> table = table0;
    EmbeddingBackward(ids.data(), dy.data(), n, d, padding, table.data());
    DeviceArray<int32_t> gids(ids);
    DeviceArray<float> gdy(dy), gtable(table0);
    auto ops = Ops();
    ops.EmbeddingBackward(gids.get(), gdy.get(), n, d, padding, gtable.get());
    ASSERT_TRUE(ops.Synchronize().ok());
    EXPECT_TRUE(BitwiseEqual(gtable.ToHost(), table)) << "padding " << padding;
  }
}

TEST(CudaTrainOpsTest, CrossEntropyWithIgnoredRows) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (int64_t v : {5, 1000, 4099}) {
    const int64_t n = 13;
    const auto logits = RandomVector(n * v, &rng, 4.0f);
    std::vector<int32_t> targets(n);
    for (int64_t r = 0; r < n; ++r) targets[r] = r % 4 == 1 ? -100 : static_cast<int32_t>(r % v);
    std::vector<float> dlogits(n * v);
    std::vector<double> rows(n);
    CrossEntropyRows(logits.data(), targets.data(), n, v, 1.0f / 9, dlogits.data(), rows.data(),
                     nullptr);
    DeviceArray<float> gl(logits), gd(n * v, kNaN);
    DeviceArray<int32_t> gt(targets);
    DeviceArray<double> grows(n, std::numeric_limits<double>::quiet_NaN());
    DeviceArray<double> grows_no_grad(n, std::numeric_limits<double>::quiet_NaN());
    auto ops = Ops();
    ops.CrossEntropy(gl.get(), gt.get(), n, v, 1.0f / 9, gd.get(), grows.get());
    ops.CrossEntropy(gl.get(), gt.get(), n, v, 1.0f / 9, nullptr, grows_no_grad.get());
    ASSERT_TRUE(ops.Synchronize().ok());
    const std::vector<float> got = gd.ToHost();
    EXPECT_LT(RelError(got, dlogits), 1e-6) << "v " << v;
    for (int64_t c = 0; c < v; ++c) EXPECT_EQ(got[v + c], 0.0f);  // row 1 is ignored
    const std::vector<double> got_rows = grows.ToHost(), got_rows2 = grows_no_grad.ToHost();
    for (int64_t r = 0; r < n; ++r) {
      EXPECT_NEAR(got_rows[r], rows[r], 1e-12 * std::fabs(rows[r])) << "v " << v << " row " << r;
      EXPECT_EQ(got_rows2[r], got_rows[r]);
    }
  }
}

TEST(CudaTrainOpsTest, RouterBackwardIsBitwiseTheCpus) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(6);
  struct Case {
    int64_t experts, top_k;
  };
  for (Case c : {Case{8, 2}, Case{60, 4}, Case{256, 8}, Case{7, 1}}) {
    for (bool normalize : {false, true}) {
      for (bool aux : {false, true}) {
        const int64_t n = 19, e = c.experts, k = c.top_k;
        const auto logits = RandomVector(n * e, &rng, 2.0f);
        std::vector<float> probs(n * e), weights(n * k);
        std::vector<int32_t> ids(n * k);
        RouteTopK(logits.data(), n, e, k, normalize, probs.data(), ids.data(), weights.data());
        const auto dweight = RandomVector(n * k, &rng), aux_dprob = RandomVector(e, &rng, 0.01f);
        const auto dlogits0 = RandomVector(n * e, &rng);
        std::vector<float> dlogits = dlogits0;
        CpuBackwardOps cpu(nullptr);
        cpu.RouterBackward(probs.data(), ids.data(), weights.data(), dweight.data(),
                           aux ? aux_dprob.data() : nullptr, n, e, k, normalize, dlogits.data());
        DeviceArray<float> gp(probs), gw(weights), gdw(dweight), gaux(aux_dprob), gdl(dlogits0);
        DeviceArray<int32_t> gids(ids);
        auto ops = Ops();
        ops.RouterBackward(gp.get(), gids.get(), gw.get(), gdw.get(), aux ? gaux.get() : nullptr, n,
                           e, k, normalize, gdl.get());
        ASSERT_TRUE(ops.Synchronize().ok());
        EXPECT_TRUE(BitwiseEqual(gdl.ToHost(), dlogits))
            << "experts " << e << " k " << k << " normalize " << normalize << " aux " << aux;
      }
    }
  }
}

// DeepSeek-V3: sigmoid scores, grouped top-k on scores + bias, weights
// normalised (or not) and scaled.
TEST(CudaTrainOpsTest, GroupedSigmoidRouterBackwardIsBitwiseTheCpus) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(9);
  const int64_t n = 300, e = 16, k = 4;
  std::vector<Parameter> store(2);
  store[0].shape = {e, 1};
  store[1].value = RandomVector(e, &rng, 0.1f);
  FeedForwardParams p;
  p.router = &store[0];
  p.score_bias = &store[1];
  p.top_k = k;
  p.n_group = 4;
  p.topk_group = 2;
  p.routed_scaling_factor = 2.5f;
  for (bool normalize : {false, true}) {
    p.norm_topk_prob = normalize;
    const auto logits = RandomVector(n * e, &rng, 2.0f);
    std::vector<float> scores(n * e), weight(n * k);
    std::vector<int32_t> ids(n * k);
    RouteGroupedSigmoid(p, logits.data(), n, scores.data(), ids.data(), weight.data());
    const auto dweight = RandomVector(n * k, &rng), dlogits0 = RandomVector(n * e, &rng);
    std::vector<float> dlogits = dlogits0;
    RouteGroupedSigmoidBackward(p, scores.data(), ids.data(), dweight.data(), n, dlogits.data());
    DeviceArray<float> gs(scores), gdw(dweight), gdl(dlogits0);
    DeviceArray<int32_t> gids(ids);
    auto ops = Ops();
    ops.GroupedSigmoidRouterBackward(gs.get(), gids.get(), gdw.get(), n, e, k, normalize,
                                     p.routed_scaling_factor, gdl.get());
    ASSERT_TRUE(ops.Synchronize().ok());
    EXPECT_TRUE(BitwiseEqual(gdl.ToHost(), dlogits)) << "normalize " << normalize;
  }
}

TEST(CudaTrainOpsTest, CausalGqaAttentionBackward) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(7);
  AttentionShape shapes[3];
  shapes[0] = {2, 33, 4, 2, 16};
  shapes[1] = {1, 70, 6, 1, 40};  // MLA-like: other value width, explicit scale
  shapes[1].v_dim = 24;
  shapes[1].scale = 0.3f;
  shapes[2] = {3, 5, 2, 2, 8};
  for (const AttentionShape& s : shapes) {
    const int64_t rows = s.batch * s.t;
    const auto q = RandomVector(rows * s.q_heads * s.head_dim, &rng);
    const auto k = RandomVector(rows * s.kv_heads * s.head_dim, &rng);
    const auto v = RandomVector(rows * s.kv_heads * s.value_dim(), &rng);
    const auto dout = RandomVector(rows * s.q_heads * s.value_dim(), &rng);
    std::vector<float> probs(s.batch * s.q_heads * s.t * s.t), out(dout.size());
    AttentionForward(s, q.data(), k.data(), v.data(), probs.data(), out.data(), nullptr);
    const auto dq0 = RandomVector(q.size(), &rng), dk0 = RandomVector(k.size(), &rng);
    const auto dv0 = RandomVector(v.size(), &rng);
    std::vector<float> dq = dq0, dk = dk0, dv = dv0;
    AttentionBackward(s, q.data(), k.data(), v.data(), probs.data(), dout.data(), dq.data(),
                      dk.data(), dv.data(), nullptr);
    DeviceArray<float> gq(q), gk(k), gv(v), gprobs(probs), gdout(dout), gdq(dq0), gdk(dk0),
        gdv(dv0), gscores(probs.size(), kNaN);
    auto ops = Ops();
    ops.AttentionBackward(s, gq.get(), gk.get(), gv.get(), gprobs.get(), gdout.get(), gdq.get(),
                          gdk.get(), gdv.get(), gscores.get());
    ASSERT_TRUE(ops.Synchronize().ok());
    EXPECT_LT(RelError(gdq.ToHost(), dq), 1e-5) << "t " << s.t;
    EXPECT_LT(RelError(gdk.ToHost(), dk), 1e-5) << "t " << s.t;
    EXPECT_TRUE(BitwiseEqual(gdv.ToHost(), dv)) << "t " << s.t;
  }
}

TEST(CudaTrainOpsTest, AdamWUpdateIsBitwiseTheCpusForEveryWeightDtype) {
  EXPERTD_REQUIRE_GPU();
  std::mt19937 rng(8);
  const int64_t n = 100003;
  const auto g = RandomVector(n, &rng, 0.1f), p0 = RandomVector(n, &rng);
  const auto m0 = RandomVector(n, &rng, 0.01f);
  std::vector<float> v0 = RandomVector(n, &rng, 1e-3f);
  for (float& x : v0) x = x * x;  // second moments are >= 0
  AdamWOptions options;
  for (int64_t step : {1, 7}) {
    const AdamWConstants c = MakeAdamWConstants(options, 1e-3, step);
    std::vector<float> p = p0, m = m0, v = v0;
    AdamWUpdateScalar(c, g.data(), p.data(), m.data(), v.data(), n);
    for (models::DType dtype : {models::DType::kBF16, models::DType::kF16, models::DType::kF32}) {
      const size_t elem = models::DTypeSize(dtype);
      std::vector<uint8_t> want(n * elem);
      if (dtype == models::DType::kF32) {
        std::memcpy(want.data(), p.data(), n * elem);
      } else {
        models::ConvertFromF32(dtype, p.data(), want.data(), n);
      }
      DeviceArray<float> gg(g), gp(p0), gm(m0), gv(v0);
      DeviceArray<uint8_t> gweight(n * elem, 0xff);
      auto ops = Ops();
      ops.AdamWUpdate(c, gg.get(), gp.get(), gm.get(), gv.get(), n, dtype, gweight.get());
      ASSERT_TRUE(ops.Synchronize().ok());
      EXPECT_TRUE(BitwiseEqual(gp.ToHost(), p)) << "step " << step;
      EXPECT_TRUE(BitwiseEqual(gm.ToHost(), m)) << "step " << step;
      EXPECT_TRUE(BitwiseEqual(gv.ToHost(), v)) << "step " << step;
      EXPECT_TRUE(gweight.ToHost() == want) << "dtype " << models::DTypeName(dtype);
    }
  }
}

TEST(CudaTrainOpsTest, ShapesOutsideTheLimitsFailAtSynchronize) {
  EXPERTD_REQUIRE_GPU();
  auto ops = Ops();
  ops.RouterBackward(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 9000, 2, true, nullptr);
  ops.SwiGluBackward(nullptr, nullptr, nullptr, nullptr, nullptr, 0);  // empty: fine
  const absl::Status s = ops.Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("RouterBackward"), std::string::npos) << s;
  EXPECT_TRUE(ops.Synchronize().ok());  // the error was reported once
}

}  // namespace
}  // namespace expertd::train
