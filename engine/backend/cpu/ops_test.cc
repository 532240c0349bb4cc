// Norm, RoPE, router, SwiGLU, adds, clamp, embedding and MoE dispatch vs
// straightforward double-precision references.
#include <cmath>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/reference_ops.h"
#include "gtest/gtest.h"

namespace expertd::engine::cpu {
namespace {

using reference::RandomVector;
using reference::RandomWeight;
using reference::RelError;
using reference::TestWeight;

TEST(RmsNormTest, MatchesReferenceForEveryDtypeAndInPlace) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::mt19937 rng(1);
    const int64_t rows = 5, dim = 37;
    TestWeight w = RandomWeight(dtype, 1, dim, &rng);
    std::vector<float> x = RandomVector(rows * dim, &rng, 3.0f);
    std::vector<double> ref = reference::RmsNorm(x, rows, dim, w, 1e-5);
    RmsNormParams p;
    p.x = x.data();
    p.x_stride = dim;
    p.out = x.data();  // in place
    p.out_stride = dim;
    p.rows = rows;
    p.dim = dim;
    p.weight = w.ref();
    p.eps = 1e-5f;
    ThreadPool pool(2);
    RmsNorm(p, &pool);
    EXPECT_LT(RelError(x, ref), 1e-6) << models::DTypeName(dtype);
  }
}

// DeepSeek-V3's layout: pair i is (x[2i], x[2i+1]).
TEST(RopeTest, InterleavedRotatesAdjacentPairs) {
  std::mt19937 rng(12);
  const int64_t rows = 2, heads = 3, hd = 10, rot = 8, stride = heads * hd + 3;
  std::vector<float> x = RandomVector(rows * stride, &rng);
  std::vector<float> orig = x;
  std::vector<float> inv_freq = {1.0f, 0.3f, 0.05f, 0.001f};
  std::vector<int32_t> pos = {7, 61};
  RopeParams p;
  p.x = x.data();
  p.row_stride = stride;
  p.rows = rows;
  p.heads = heads;
  p.head_dim = hd;
  p.rotary_dim = rot;
  p.positions = pos.data();
  p.inv_freq = inv_freq.data();
  p.attention_factor = 0.75f;
  p.interleaved = true;
  Rope(p, nullptr);
  std::vector<double> ref(orig.begin(), orig.end());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* o = orig.data() + t * stride + h * hd;
      double* r = ref.data() + t * stride + h * hd;
      for (int64_t i = 0; i < rot / 2; ++i) {
        double a = pos[t] * static_cast<double>(inv_freq[i]);
        r[2 * i] = 0.75 * (o[2 * i] * std::cos(a) - o[2 * i + 1] * std::sin(a));
        r[2 * i + 1] = 0.75 * (o[2 * i + 1] * std::cos(a) + o[2 * i] * std::sin(a));
      }
    }
  }
  EXPECT_LT(RelError(x, ref), 1e-5);
}

TEST(RopeTest, RotatesPairsByPositionTimesFrequency) {
  std::mt19937 rng(2);
  const int64_t rows = 3, heads = 2, hd = 8, rot = 6;
  std::vector<float> x = RandomVector(rows * heads * hd, &rng);
  std::vector<float> orig = x;
  std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f};
  std::vector<int32_t> pos = {0, 5, 130};
  RopeParams p;
  p.x = x.data();
  p.row_stride = heads * hd;
  p.rows = rows;
  p.heads = heads;
  p.head_dim = hd;
  p.rotary_dim = rot;
  p.positions = pos.data();
  p.inv_freq = inv_freq.data();
  p.attention_factor = 1.5f;
  Rope(p, nullptr);
  std::vector<double> ref(x.size());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* o = orig.data() + (t * heads + h) * hd;
      double* r = ref.data() + (t * heads + h) * hd;
      for (int64_t i = 0; i < hd; ++i) r[i] = o[i];  // dims past rotary_dim untouched
      for (int64_t i = 0; i < rot / 2; ++i) {
        double a = pos[t] * static_cast<double>(inv_freq[i]);
        r[i] = 1.5 * (o[i] * std::cos(a) - o[i + rot / 2] * std::sin(a));
        r[i + rot / 2] = 1.5 * (o[i + rot / 2] * std::cos(a) + o[i] * std::sin(a));
      }
    }
  }
  EXPECT_LT(RelError(x, ref), 1e-5);
}

TEST(SoftmaxTopKTest, RanksByWeightWithTiesToLowerIdAndRenormalises) {
  // Row 0: experts 1 and 3 tie for first place -> 1 ranks before 3.
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f,  1.0f,  //
                               3.0f, 0.0f, 0.0f,  -2.0f, 4.0f};
  for (bool renorm : {false, true}) {
    std::vector<int32_t> ids(2 * 3);
    std::vector<float> w(2 * 3);
    SoftmaxTopKParams p;
    p.logits = logits.data();
    p.rows = 2;
    p.num_experts = 5;
    p.top_k = 3;
    p.renormalize = renorm;
    p.ids = ids.data();
    p.weights = w.data();
    SoftmaxTopK(p, nullptr);
    EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 4, 0, 1}));
    for (int r = 0; r < 2; ++r) {
      double z = 0;
      for (int e = 0; e < 5; ++e) z += std::exp(logits[r * 5 + e]);
      double chosen = 0;
      for (int j = 0; j < 3; ++j) chosen += std::exp(logits[r * 5 + ids[r * 3 + j]]) / z;
      for (int j = 0; j < 3; ++j) {
        double pj = std::exp(logits[r * 5 + ids[r * 3 + j]]) / z;
        EXPECT_NEAR(w[r * 3 + j], renorm ? pj / chosen : pj, 1e-6);
      }
    }
  }
}

TEST(SwiGluTest, SiluOfGateTimesUp) {
  std::mt19937 rng(4);
  std::vector<float> g = RandomVector(2 * 9, &rng, 4.0f), u = RandomVector(2 * 9, &rng);
  std::vector<float> out(2 * 9);
  SwiGluParams p{g.data(), 9, u.data(), 9, out.data(), 9, 2, 9};
  SwiGlu(p, nullptr);
  std::vector<double> ref(out.size());
  for (size_t i = 0; i < out.size(); ++i) ref[i] = reference::Silu(g[i]) * u[i];
  EXPECT_LT(RelError(out, ref), 1e-6);
}

TEST(AddRowsTest, PlainIdentityAndSigmoidScales) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<float> scale = {0.5f, -2.0f};
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<float> y = {10, 20, 30, 40, 50, 60};
    AddRowsParams p;
    p.y = y.data();
    p.y_stride = 3;
    p.x = x.data();
    p.x_stride = 3;
    p.scale = mode == 0 ? nullptr : scale.data();
    p.scale_fn = mode == 2 ? RowScale::kSigmoid : RowScale::kIdentity;
    p.rows = 2;
    p.dim = 3;
    AddRows(p, nullptr);
    for (int r = 0; r < 2; ++r) {
      double s = mode == 0 ? 1.0 : mode == 1 ? scale[r] : 1.0 / (1.0 + std::exp(-scale[r]));
      for (int i = 0; i < 3; ++i)
        EXPECT_NEAR(y[r * 3 + i], 10.0 * (r * 3 + i + 1) + s * x[r * 3 + i], 1e-5);
    }
  }
}

TEST(ClampTest, ClampsToSymmetricLimitWithinStride) {
  std::vector<float> x = {-9, 0.5f, 9, 100, 3, -3, 2, 100};
  ClampParams p{x.data(), 4, 2, 3, 2.5f};
  Clamp(p, nullptr);
  EXPECT_EQ(x, (std::vector<float>{-2.5f, 0.5f, 2.5f, 100, 2.5f, -2.5f, 2, 100}));
}

TEST(EmbeddingTest, LooksUpRowsInEveryDtype) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::mt19937 rng(6);
    TestWeight table = RandomWeight(dtype, 10, 7, &rng);
    std::vector<int32_t> ids = {3, 0, 9, 3};
    std::vector<float> out(4 * 7);
    EmbeddingParams p{ids.data(), 4, table.ref(), out.data()};
    Embedding(p, nullptr);
    for (int t = 0; t < 4; ++t) {
      for (int i = 0; i < 7; ++i)
        EXPECT_EQ(out[t * 7 + i], static_cast<float>(table.exact[ids[t] * 7 + i]));
    }
  }
}

TEST(MoeDispatchTest, GatherScatterAndCombineInExpertIdOrder) {
  const int64_t dim = 5, tokens = 3, top_k = 2;
  std::mt19937 rng(8);
  std::vector<float> x = RandomVector(tokens * dim, &rng);
  // Gather tokens 2 and 0.
  std::vector<int32_t> index = {2, 0};
  std::vector<float> gathered(2 * dim);
  GatherRows(GatherRowsParams{x.data(), dim, index.data(), gathered.data(), 2, dim}, nullptr);
  EXPECT_EQ(0, std::memcmp(gathered.data(), x.data() + 2 * dim, dim * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(gathered.data() + dim, x.data(), dim * sizeof(float)));
  // Scatter to slots 5 and 0.
  std::vector<float> slots(tokens * top_k * dim, 0.0f);
  std::vector<int32_t> slot_index = {5, 0};
  ScatterRows(ScatterRowsParams{gathered.data(), slot_index.data(), slots.data(), 2, dim}, nullptr);
  EXPECT_EQ(0, std::memcmp(slots.data() + 5 * dim, x.data() + 2 * dim, dim * sizeof(float)));
  // Combine.
  slots = RandomVector(tokens * top_k * dim, &rng);
  std::vector<int32_t> ids = {4, 1, 0, 7, 3, 2};
  std::vector<float> w = {0.7f, 0.3f, 0.6f, 0.4f, 0.9f, 0.1f};
  std::vector<float> out(tokens * dim, 1.0f);
  MoeCombineParams p{slots.data(), w.data(), ids.data(), out.data(), dim,
                     tokens,       top_k,    dim,        false};
  MoeCombine(p, nullptr);
  for (int t = 0; t < tokens; ++t) {
    // Ascending expert id: the rank whose id is smaller is added first.
    const int first = ids[t * 2] < ids[t * 2 + 1] ? 0 : 1;
    for (int i = 0; i < dim; ++i) {
      float acc = 0.0f;
      for (int j : {first, 1 - first}) {
        float term = w[t * 2 + j] * slots[(t * 2 + j) * dim + i];
        acc = acc + term;
      }
      EXPECT_EQ(out[t * dim + i], acc);
    }
  }
}

// One MoeScatterAdd per routed expert in ascending id over a zeroed out is
// MoeCombine bitwise: the same terms, added in the same order per token.
TEST(OpsTest, ScatterAddPerExpertInAscendingIdIsMoeCombine) {
  std::mt19937 rng(21);
  const int64_t experts = 16, tokens = 37;
  for (int64_t top_k : {1, 2, 8}) {
    for (int64_t dim : {1, 7, 130}) {
      for (int threads : {1, 3}) {
        std::vector<int32_t> ids(tokens * top_k);
        for (int64_t t = 0; t < tokens; ++t) {  // distinct ids per token, any rank order
          std::vector<int32_t> e(experts);
          std::iota(e.begin(), e.end(), 0);
          std::shuffle(e.begin(), e.end(), rng);
          std::copy(e.begin(), e.begin() + top_k, ids.begin() + t * top_k);
        }
        const std::vector<float> w = RandomVector(tokens * top_k, &rng);
        const std::vector<float> y = RandomVector(tokens * top_k * dim, &rng, 4.0f);
        ThreadPool pool(threads);
        std::vector<float> want(tokens * dim, 5.0f);
        MoeCombine(MoeCombineParams{y.data(), w.data(), ids.data(), want.data(), dim, tokens,
                                    top_k, dim, false},
                   &pool);
        std::vector<float> got(tokens * dim, 0.0f);
        for (int32_t e = 0; e < experts; ++e) {
          std::vector<int32_t> slot;  // this expert's slots, in token order
          for (int64_t s = 0; s < tokens * top_k; ++s)
            if (ids[s] == e) slot.push_back(static_cast<int32_t>(s));
          std::vector<float> src(slot.size() * dim);
          for (size_t i = 0; i < slot.size(); ++i)
            std::copy_n(y.data() + slot[i] * dim, dim, src.data() + i * dim);
          MoeScatterAdd(MoeScatterAddParams{src.data(), slot.data(), w.data(), got.data(),
                                            static_cast<int64_t>(slot.size()), top_k, dim},
                        &pool);
        }
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << "top_k " << top_k << " dim " << dim << " threads " << threads;
      }
    }
  }
}

}  // namespace
}  // namespace expertd::engine::cpu
