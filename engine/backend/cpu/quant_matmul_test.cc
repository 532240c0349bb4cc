// Every quantized matmul variant against the scalar reference, and the scalar
// reference against a double-precision product with the dequantized weight.
#include "engine/backend/cpu/quant_matmul.h"

#include <cmath>
#include <random>
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

TEST_P(QuantMatmulTest, SimdVariantsMatchTheScalarReference) {
  const auto [f, g] = GetParam();
  const int64_t n = 37, k = 512, m = 5;
  QuantWeight q = MakeWeight(f, g, n, k, 11);
  std::mt19937 rng(5);
  const std::vector<float> x = reference::RandomVector(m * k, &rng);
  for (bool accumulate : {false, true}) {
    const std::vector<float> want = RunVariant(q.ref, x, m, QuantMatmulScalar, accumulate);
    std::vector<std::pair<CpuIsa, void (*)(const MatmulParams&, int64_t, int64_t)>> variants = {
        {CpuIsa::kAvx2, QuantMatmulAvx2}, {CpuIsa::kAvx512, QuantMatmulAvx512}};
    for (auto [isa, variant] : variants) {
      if (!CpuSupports(isa)) {
        std::printf("%s not supported by this CPU: not checked\n", CpuIsaName(isa));
        continue;
      }
      if (g % (isa == CpuIsa::kAvx512 ? 16 : 8) != 0) continue;  // QuantMatmulIsa never picks it
      const std::vector<float> got = RunVariant(q.ref, x, m, variant, accumulate);
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << CpuIsaName(isa) << i;
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

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmulTest,
                         ::testing::Values(Case{WeightFormat::kInt8, 32},
                                           Case{WeightFormat::kInt8, 128},
                                           Case{WeightFormat::kInt4, 32},
                                           Case{WeightFormat::kInt4, 128},
                                           Case{WeightFormat::kMxfp4, 32},
                                           Case{WeightFormat::kInt8, 8}),  // AVX2 at most
                         [](const auto& info) {
                           return std::string(WeightFormatName(info.param.format)) + "_g" +
                                  std::to_string(info.param.group);
                         });

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
