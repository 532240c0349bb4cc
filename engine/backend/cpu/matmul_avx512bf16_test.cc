// The bf16-activation matmul (matmul_dense.h, MatmulActivations::kBF16):
// bitwise its scalar sequence (reference_ops.h) for every m, k tail, split
// and thread count; batch-invariant; near the double-precision product of the
// bf16-rounded x; and only bf16 weights are affected.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/matmul_unit.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/weight_quantize.h"
#include "gtest/gtest.h"

namespace expertd::engine::cpu {
namespace {

using reference::RandomVector;
using reference::RandomWeight;
using reference::TestWeight;

struct Case {
  int64_t m, n, k;
  bool bias, accumulate;
  std::string Describe() const {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           (bias ? " bias" : "") + (accumulate ? " accumulate" : "");
  }
};

// x row stride k + 3, y row stride n + 5; y starts as y0.
MatmulParams Params(const Case& c, const std::vector<float>& x, const TestWeight& w,
                    const TestWeight& b, std::vector<float>* y) {
  MatmulParams p;
  p.x = x.data();
  p.x_stride = c.k + 3;
  p.w = w.ref();
  if (c.bias) p.bias = b.ref();
  p.y = y->data();
  p.y_stride = c.n + 5;
  p.m = c.m;
  p.accumulate = c.accumulate;
  p.activations = MatmulActivations::kBF16;
  return p;
}

class Bf16ActivationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuSupportsBf16Dot()) GTEST_SKIP() << "the CPU lacks AVX-512-BF16";
  }
};

// Matmul on 1 and 2 threads, and the unit function over a split of rows (3)
// and columns (5) as GroupedMatmul may cut them, all bitwise the scalar
// sequence: m = 1..9 (decode and every tile row count), then prefill sizes;
// k below, at and around multiples of 32.
TEST_F(Bf16ActivationsTest, EveryPathIsBitwiseTheScalarSequence) {
  ThreadPool two(2);
  std::vector<Case> cases;
  for (int64_t m = 1; m <= 9; ++m) {
    for (int64_t k : {1, 5, 17, 31, 32, 33, 64, 95, 131, 300}) {
      for (int64_t n : {1, 7, 29})
        cases.push_back({m, n, k, (m + k) % 2 == 0, (m + n + k) % 3 == 0});
    }
  }
  cases.push_back({130, 37, 40, true, false});
  cases.push_back({257, 13, 2051, false, true});
  cases.push_back({64, 70, 512, true, true});
  for (const Case& c : cases) {
    std::mt19937 rng(static_cast<uint32_t>(c.m * 7919 + c.k * 31 + c.n));
    TestWeight w = RandomWeight(DType::kBF16, c.n, c.k, &rng);
    TestWeight b = RandomWeight(DType::kBF16, 1, c.n, &rng);
    std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
    std::vector<float> y0 = RandomVector(c.m * (c.n + 5), &rng);
    std::vector<float> want = y0;
    reference::DenseMatmulSequence(x.data(), c.k + 3, c.m, w, c.bias ? &b : nullptr, c.accumulate,
                                   want.data(), c.n + 5, MatmulActivations::kBF16);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
      std::vector<float> got = y0;
      Matmul(Params(c, x, w, b, &got), pool);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << c.Describe() << " threads=" << (pool == nullptr ? 1 : 2);
    }
    std::vector<float> cut = y0;
    const MatmulParams p = Params(c, x, w, b, &cut);
    for (int64_t r0 = 0; r0 < c.m; r0 += 3) {
      for (int64_t c0 = 0; c0 < c.n; c0 += 5)
        MatmulUnit(p, r0, std::min(c.m, r0 + 3), c0, std::min(c.n, c0 + 5));
    }
    ASSERT_EQ(0, std::memcmp(cut.data(), want.data(), cut.size() * sizeof(float)))
        << c.Describe() << " units";
  }
}

// A row alone (decode) gives the bits it gives anywhere in a prefill batch,
// and GroupedMatmul gives one Matmul per group's bits.
TEST_F(Bf16ActivationsTest, RowAloneEqualsRowInABatchAndGroupsEqualMatmuls) {
  ThreadPool two(2);
  std::mt19937 rng(11);
  const int64_t n = 77, k = 2051;
  TestWeight w = RandomWeight(DType::kBF16, n, k, &rng);
  TestWeight b = RandomWeight(DType::kBF16, 1, n, &rng);
  std::vector<float> row = RandomVector(k + 3, &rng);
  std::vector<float> alone(n + 5, 0.0f);
  Matmul(Params({1, n, k, true, false}, row, w, b, &alone), nullptr);
  for (int64_t m : {2, 4, 5, 17, 66, 200}) {
    for (int64_t at : {int64_t{0}, m / 2, m - 1}) {
      std::vector<float> x = RandomVector(m * (k + 3), &rng);
      std::memcpy(x.data() + at * (k + 3), row.data(), k * sizeof(float));
      std::vector<float> y(m * (n + 5), 0.0f);
      Matmul(Params({m, n, k, true, false}, x, w, b, &y), (m % 2) ? &two : nullptr);
      ASSERT_EQ(0, std::memcmp(y.data() + at * (n + 5), alone.data(), n * sizeof(float)))
          << "m=" << m << " at=" << at;
    }
  }
  // Three experts' weights, 0, 9 and 70 rows.
  std::vector<TestWeight> ws;
  for (int g = 0; g < 3; ++g) ws.push_back(RandomWeight(DType::kBF16, n, k, &rng));
  const std::vector<int64_t> offset = {0, 0, 9, 79};
  std::vector<float> x = RandomVector(79 * (k + 3), &rng);
  std::vector<WeightRef> refs;
  for (const TestWeight& t : ws) refs.push_back(t.ref());
  GroupedMatmulParams g;
  g.x = x.data();
  g.x_stride = k + 3;
  g.w = refs.data();
  g.row_offset = offset.data();
  g.groups = 3;
  std::vector<float> grouped(79 * (n + 5), 0.0f);
  g.y = grouped.data();
  g.y_stride = n + 5;
  g.n = n;
  g.k = k;
  g.activations = MatmulActivations::kBF16;
  GroupedMatmul(g, &two);
  std::vector<float> each(79 * (n + 5), 0.0f);
  for (int grp = 1; grp < 3; ++grp) {
    const int64_t rows = offset[grp + 1] - offset[grp];
    std::vector<float> xs(x.begin() + offset[grp] * (k + 3), x.begin() + offset[grp + 1] * (k + 3));
    std::vector<float> ys(rows * (n + 5), 0.0f);
    Matmul(Params({rows, n, k, false, false}, xs, ws[grp], b, &ys), nullptr);
    std::copy(ys.begin(), ys.end(), each.begin() + offset[grp] * (n + 5));
  }
  ASSERT_EQ(0, std::memcmp(grouped.data(), each.data(), each.size() * sizeof(float)));
}

// Near the exact product of the bf16-rounded x (fp32 summation error only),
// and not the fp32-activation result: x really is rounded.
TEST_F(Bf16ActivationsTest, NearTheProductOfRoundedActivations) {
  std::mt19937 rng(3);
  const Case c{33, 130, 1000, true, false};
  TestWeight w = RandomWeight(DType::kBF16, c.n, c.k, &rng);
  TestWeight b = RandomWeight(DType::kBF16, 1, c.n, &rng);
  std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
  std::vector<float> got(c.m * (c.n + 5), 0.0f);
  MatmulParams p = Params(c, x, w, b, &got);
  Matmul(p, nullptr);
  std::vector<float> fp32 = std::vector<float>(got.size(), 0.0f);
  p.y = fp32.data();
  p.activations = MatmulActivations::kF32;
  Matmul(p, nullptr);
  int differ = 0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t col = 0; col < c.n; ++col) {
      double ref = b.exact[col], mag = std::fabs(b.exact[col]);
      for (int64_t i = 0; i < c.k; ++i) {
        const double t =
            double{reference::RoundToBf16(x[r * (c.k + 3) + i])} * w.exact[col * c.k + i];
        ref += t;
        mag += std::fabs(t);
      }
      const float v = got[r * (c.n + 5) + col];
      ASSERT_LE(std::fabs(v - ref), 1e-5 * mag) << "r=" << r << " c=" << col;
      differ += v != fp32[r * (c.n + 5) + col];
    }
  }
  EXPECT_GT(differ, c.m * c.n / 2);
}

// fp32 and fp16 weights ignore the mode: bitwise the fp32-activation result.
TEST_F(Bf16ActivationsTest, OtherWeightDtypesIgnoreTheMode) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    std::mt19937 rng(9);
    const Case c{20, 33, 70, true, true};
    TestWeight w = RandomWeight(dtype, c.n, c.k, &rng);
    TestWeight b = RandomWeight(dtype, 1, c.n, &rng);
    std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
    std::vector<float> y0 = RandomVector(c.m * (c.n + 5), &rng);
    std::vector<float> bf = y0, f32 = y0;
    MatmulParams p = Params(c, x, w, b, &bf);
    Matmul(p, nullptr);
    p.y = f32.data();
    p.activations = MatmulActivations::kF32;
    Matmul(p, nullptr);
    ASSERT_EQ(0, std::memcmp(bf.data(), f32.data(), bf.size() * sizeof(float)))
        << models::DTypeName(dtype);
  }
}

// Quantized experts: codes and scales as QuantizeWeights writes them.
using Quantized = reference::QuantizedWeight;

Quantized Quantize(WeightFormat f, int group, int64_t n, int64_t k, uint32_t seed) {
  Quantized q;
  EXPECT_TRUE(reference::QuantizeRandomWeight(f, group, n, k, seed, &q).ok());
  return q;
}

// int8 / int4 / mxfp4 with groups of 32, 64, 128: Matmul (1 and 2 threads),
// units over odd splits and GroupedMatmul all bitwise the scalar sequence,
// for decode and prefill row counts.
TEST_F(Bf16ActivationsTest, QuantizedExpertsAreBitwiseTheScalarSequence) {
  if (!CpuSupportsQuantBf16Dot()) GTEST_SKIP() << "the CPU lacks AVX-512-VBMI";
  ThreadPool two(2);
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kMxfp4}) {
    for (int g : {32, 64, 128}) {
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 29, 256},
                             {2, 7, 128},
                             {3, 13, 384},
                             {4, 6, 256},
                             {9, 31, 512},
                             {70, 17, 256}}) {
        const Case c{m, n, k, (m + n) % 2 == 0, m % 3 == 0};
        const std::string what =
            std::string(WeightFormatName(f)) + " g" + std::to_string(g) + " " + c.Describe();
        Quantized q = Quantize(f, g, n, k, static_cast<uint32_t>(m * 131 + n + g));
        std::mt19937 rng(static_cast<uint32_t>(k + g));
        TestWeight b = RandomWeight(DType::kBF16, 1, n, &rng);
        std::vector<float> x = RandomVector(m * (k + 3), &rng);
        std::vector<float> y0 = RandomVector(m * (n + 5), &rng);
        std::vector<float> want = y0;
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t col = 0; col < n; ++col) {
            float v = reference::QuantDotBf16Activations(x.data() + r * (k + 3), q.values.data(),
                                                         q.ref.quant, k, col);
            if (c.bias) v = v + static_cast<float>(b.exact[col]);
            float& out = want[r * (n + 5) + col];
            out = c.accumulate ? out + v : v;
          }
        }
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
          std::vector<float> got = y0;
          MatmulParams p = Params(c, x, TestWeight(), b, &got);
          p.w = q.ref;
          Matmul(p, pool);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << what << " threads=" << (pool == nullptr ? 1 : 2);
        }
        std::vector<float> cut = y0;
        MatmulParams p = Params(c, x, TestWeight(), b, &cut);
        p.w = q.ref;
        for (int64_t r0 = 0; r0 < m; r0 += 3) {
          for (int64_t c0 = 0; c0 < n; c0 += 5)
            MatmulUnit(p, r0, std::min(m, r0 + 3), c0, std::min(n, c0 + 5));
        }
        ASSERT_EQ(0, std::memcmp(cut.data(), want.data(), cut.size() * sizeof(float)))
            << what << " units";
      }
    }
  }
}

// Groups the kernel does not take (int8 with groups of 16) keep the
// fp32-activation kernels: bitwise the kF32 result. (FP8 blocks:
// matmul_fp8_test.cc.)
TEST_F(Bf16ActivationsTest, OtherQuantizedFormatsIgnoreTheMode) {
  Quantized q = Quantize(WeightFormat::kInt8, 16, 13, 128, 5);
  std::mt19937 rng(1);
  std::vector<float> x = RandomVector(5 * 131, &rng);
  const Case c{5, 13, 128, false, false};
  std::vector<float> bf(5 * 18, 0.0f), f32(5 * 18, 0.0f);
  MatmulParams p = Params(c, x, TestWeight(), TestWeight(), &bf);
  p.w = q.ref;
  Matmul(p, nullptr);
  p.y = f32.data();
  p.activations = MatmulActivations::kF32;
  Matmul(p, nullptr);
  ASSERT_EQ(0, std::memcmp(bf.data(), f32.data(), bf.size() * sizeof(float)));
}

}  // namespace
}  // namespace expertd::engine::cpu
