// Every quantized matmul variant against the scalar reference, and the scalar
// reference against a double-precision product with the dequantized weight.
#include "engine/backend/cpu/quant_matmul.h"

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/weight_quantize.h"
#include "gtest/gtest.h"

namespace expertd::engine::cpu {
namespace {

struct QuantWeight {
  std::vector<uint8_t> values, scales;
  std::vector<float> dequantized;
  WeightRef ref;
};

QuantWeight MakeWeight(WeightFormat f, int group, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<float> w = reference::RandomVector(n * k, &rng, 0.05f);
  QuantWeight q;
  WeightQuant wq;
  wq.format = f;
  wq.group_size = group;
  wq.scale_dtype = f == WeightFormat::kMxfp4 ? ScaleDType::kE8M0 : ScaleDType::kF16;
  q.values.resize(QuantValueBytes(f, n, k));
  q.scales.resize(QuantScaleBytes(wq, n, k));
  EXPECT_TRUE(QuantizeWeights(w.data(), n, k, wq, q.values.data(), q.scales.data()).ok());
  wq.scales = q.scales.data();
  q.dequantized.resize(n * k);
  DequantizeWeights(q.values.data(), wq, n, k, q.dequantized.data());
  q.ref = WeightRef{q.values.data(), DType::kF32, n, k, wq};
  return q;
}

std::vector<float> RunVariant(const WeightRef& w, const std::vector<float>& x, int64_t m,
                       void (*variant)(const MatmulParams&, int64_t, int64_t), bool accumulate) {
  std::vector<float> y(m * w.rows, 0.5f);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = w.cols;
  p.w = w;
  p.y = y.data();
  p.y_stride = w.rows;
  p.m = m;
  p.accumulate = accumulate;
  variant(p, 0, w.rows);
  return y;
}

using Variant = void (*)(const MatmulParams&, int64_t, int64_t);

struct Case {
  WeightFormat format;
  int group;
};

class QuantMatmulTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantMatmulTest, ScalarReferenceEqualsTheDequantizedProduct) {
  const auto [f, g] = GetParam();
  const int64_t n = 37, k = 256, m = 3;  // 37: full 4-column tiles and single columns
  QuantWeight q = MakeWeight(f, g, n, k, 7);
  std::mt19937 rng(3);
  const std::vector<float> x = reference::RandomVector(m * k, &rng);
  const std::vector<float> y = RunVariant(q.ref, x, m, QuantMatmulScalar, /*accumulate=*/false);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double want = 0;
      for (int64_t i = 0; i < k; ++i)
        want += static_cast<double>(x[r * k + i]) * q.dequantized[c * k + i];
      EXPECT_NEAR(y[r * n + c], want, 1e-5 * (1 + std::fabs(want))) << r << "," << c;
    }
  }
}

// k = 512 takes the blocked AVX-512 kernel for groups 32-128; k = 160 is not
// a whole number of 64-byte lines, so QuantMatmulAvx512 falls back to the
// generic loop there.
TEST_P(QuantMatmulTest, SimdVariantsMatchTheScalarReference) {
  const auto [f, g] = GetParam();
  for (int64_t k : {512, 160}) {
    if (k % g != 0) continue;
    const int64_t n = 37, m = 5;  // 37: full 8-column tiles and single columns
    QuantWeight q = MakeWeight(f, g, n, k, 11);
    std::mt19937 rng(5);
    const std::vector<float> x = reference::RandomVector(m * k, &rng);
    for (bool accumulate : {false, true}) {
      const std::vector<float> want = RunVariant(q.ref, x, m, QuantMatmulScalar, accumulate);
      const std::vector<std::tuple<const char*, CpuIsa, Variant>> variants = {
          {"avx2", CpuIsa::kAvx2, QuantMatmulAvx2},
          {"avx512", CpuIsa::kAvx512, QuantMatmulAvx512},
          {"avx512-generic", CpuIsa::kAvx512, QuantMatmulAvx512Generic}};
      for (auto [name, isa, variant] : variants) {
        if (!CpuSupports(isa)) {
          std::printf("%s not supported by this CPU: not checked\n", name);
          continue;
        }
        if (g % (isa == CpuIsa::kAvx512 ? 16 : 8) != 0) continue;  // never picked
        const std::vector<float> got = RunVariant(q.ref, x, m, variant, accumulate);
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
              << name << " k=" << k << " " << i;
        }
      }
    }
  }
}

// Batch invariance: a row's result is bitwise the same alone or in a batch,
// whatever the thread split.
TEST_P(QuantMatmulTest, RowsAreBatchAndThreadInvariant) {
  const auto [f, g] = GetParam();
  const int64_t n = 64, k = 256, m = 9;
  QuantWeight q = MakeWeight(f, g, n, k, 13);
  std::mt19937 rng(9);
  const std::vector<float> x = reference::RandomVector(m * k, &rng);
  ThreadPool pool(2);
  std::vector<float> batch(m * n);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = k;
  p.w = q.ref;
  p.y = batch.data();
  p.y_stride = n;
  p.m = m;
  Matmul(p, &pool);
  for (int64_t r = 0; r < m; ++r) {
    std::vector<float> one(n);
    MatmulParams p1 = p;
    p1.x = x.data() + r * k;
    p1.y = one.data();
    p1.m = 1;
    Matmul(p1, nullptr);
    for (int64_t c = 0; c < n; ++c) ASSERT_EQ(one[c], batch[r * n + c]) << r << "," << c;
  }
}

// The AVX-512 kernel decodes a tile once for many rows (prefill) and once per
// row for a few (decode): both give a row bitwise the same result, on full and
// partial column tiles.
TEST_P(QuantMatmulTest, Avx512PanelRowsEqualSingleRows) {
  if (!CpuSupports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const auto [f, g] = GetParam();
  if (g % 16 != 0) return;
  const int64_t n = 37, k = 512, m = 7;
  QuantWeight q = MakeWeight(f, g, n, k, 29);
  std::mt19937 rng(31);
  const std::vector<float> x = reference::RandomVector(m * k, &rng);
  const std::vector<float> batch = RunVariant(q.ref, x, m, QuantMatmulAvx512, false);
  for (int64_t r = 0; r < m; ++r) {
    const std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> one = RunVariant(q.ref, row, 1, QuantMatmulAvx512, false);
    for (int64_t c = 0; c < n; ++c) ASSERT_EQ(one[c], batch[r * n + c]) << r << "," << c;
  }
}

// More rows than the panel path's row block (about 4 MiB of x: 256 rows at
// k = 4096): the second block's rows equal the one-row results too.
TEST(QuantMatmulBlockedTest, PanelRowBlocks) {
  if (!CpuSupports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t n = 12, k = 4096, m = 300;
  QuantWeight q = MakeWeight(WeightFormat::kInt4, 128, n, k, 37);
  std::mt19937 rng(41);
  const std::vector<float> x = reference::RandomVector(m * k, &rng);
  const std::vector<float> batch = RunVariant(q.ref, x, m, QuantMatmulAvx512, false);
  for (int64_t r : {0, 255, 256, 299}) {
    const std::vector<float> row(x.begin() + r * k, x.begin() + (r + 1) * k);
    const std::vector<float> one = RunVariant(q.ref, row, 1, QuantMatmulAvx512, false);
    for (int64_t c = 0; c < n; ++c) ASSERT_EQ(one[c], batch[r * n + c]) << r << "," << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmulTest,
                         ::testing::Values(Case{WeightFormat::kInt8, 32},
                                           Case{WeightFormat::kInt8, 128},
                                           Case{WeightFormat::kInt4, 32},
                                           Case{WeightFormat::kInt4, 128},
                                           Case{WeightFormat::kInt4, 64},
                                           Case{WeightFormat::kMxfp4, 32},
                                           Case{WeightFormat::kInt8, 8}),  // AVX2 at most
                         [](const auto& info) {
                           return std::string(WeightFormatName(info.param.format)) + "_g" +
                                  std::to_string(info.param.group);
                         });

// Bias (+ accumulate) on both AVX-512 paths: decode rows (m = 2) and the
// prefill panel (m = 6), against the scalar reference.
TEST(QuantMatmulBlockedTest, BiasOnBothPaths) {
  if (!CpuSupports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t n = 19, k = 256;
  QuantWeight q = MakeWeight(WeightFormat::kInt8, 32, n, k, 43);
  std::vector<float> bias(n);
  for (int64_t c = 0; c < n; ++c) bias[c] = 0.25f * static_cast<float>(c) - 2.0f;
  for (int64_t m : {2, 6}) {
    std::mt19937 rng(47);
    const std::vector<float> x = reference::RandomVector(m * k, &rng);
    std::vector<float> want(m * n, 0.5f), got(m * n, 0.5f);
    MatmulParams p;
    p.x = x.data();
    p.x_stride = k;
    p.w = q.ref;
    p.bias = WeightRef{bias.data(), DType::kF32, 1, n};
    p.y_stride = n;
    p.m = m;
    p.accumulate = true;
    p.y = want.data();
    QuantMatmulScalar(p, 0, n);
    p.y = got.data();
    QuantMatmulAvx512(p, 0, n);
    for (int64_t i = 0; i < m * n; ++i)
      EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << "m=" << m << " " << i;
  }
}

// The blocked AVX-512 kernel takes the shapes it was written for, and only those.
TEST(QuantMatmulBlockedTest, TakesWholeLinesOfCodesInGroupsOf32To128) {
  if (!CpuSupports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t n = 8;
  for (auto [f, g, k, blocked] :
       std::vector<std::tuple<WeightFormat, int, int64_t, bool>>{
           {WeightFormat::kInt8, 32, 64, true},
           {WeightFormat::kInt8, 32, 96, false},  // half a line
           {WeightFormat::kInt8, 16, 64, false},
           {WeightFormat::kInt4, 128, 128, true},
           {WeightFormat::kInt4, 32, 64, false},  // half a line
           {WeightFormat::kMxfp4, 32, 256, true},
           {WeightFormat::kInt8, 32, 32 * 513, false}}) {  // too many groups per row
    QuantWeight q = MakeWeight(f, g, n, k, 17);
    std::vector<float> x(k, 1.0f), y(n, -1.0f);
    MatmulParams p;
    p.x = x.data();
    p.x_stride = k;
    p.w = q.ref;
    p.y = y.data();
    p.y_stride = n;
    p.m = 1;
    EXPECT_EQ(QuantMatmulAvx512Blocked(p, 0, n), blocked) << WeightFormatName(f) << g << " " << k;
    if (!blocked) {
      EXPECT_EQ(y[0], -1.0f) << "a refused weight must be left alone";
    }
  }
}

// E8M0 scales at the ends of their range (2^-127, NaN) convert as the scalar
// reference converts them.
TEST(QuantMatmulBlockedTest, Mxfp4ExtremeScales) {
  const int64_t n = 9, k = 512;
  QuantWeight q = MakeWeight(WeightFormat::kMxfp4, 32, n, k, 19);
  const int64_t groups = k / 32;
  for (int64_t i = 0; i < n * groups; ++i) {
    const uint8_t e[] = {0, 1, 100, 127, 140, 150};
    q.scales[i] = e[i % 6];
  }
  q.scales[3 * groups + 5] = 255;  // column 3: NaN
  std::mt19937 rng(23);
  const std::vector<float> x = reference::RandomVector(k, &rng);
  const std::vector<float> want = RunVariant(q.ref, x, 1, QuantMatmulScalar, false);
  if (!CpuSupports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  const std::vector<float> got = RunVariant(q.ref, x, 1, QuantMatmulAvx512, false);
  for (int64_t c = 0; c < n; ++c) {
    if (c == 3) {
      EXPECT_TRUE(std::isnan(want[c]) && std::isnan(got[c]));
    } else {
      EXPECT_NEAR(got[c], want[c], 2e-5 * (1 + std::fabs(want[c]))) << c;
    }
  }
}

TEST(QuantMatmulIsaTest, GroupSizesTheWideVariantsCannotStepFallBack) {
  WeightRef w;
  w.quant.format = WeightFormat::kInt8;
  MatmulParams p;
  p.w = w;
  p.w.quant.group_size = 8;
  EXPECT_NE(QuantMatmulIsa(p, CpuIsa::kAvx512), CpuIsa::kAvx512);
  p.w.quant.group_size = 6;
  EXPECT_EQ(QuantMatmulIsa(p, CpuIsa::kAvx512), CpuIsa::kScalar);
  p.w.quant.group_size = 32;
  EXPECT_EQ(QuantMatmulIsa(p, CpuIsa::kScalar), CpuIsa::kScalar);
}

}  // namespace
}  // namespace expertd::engine::cpu
