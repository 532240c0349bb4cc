#include <cstring>
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

struct Case {
  DType dtype;
  int64_t m, n, k;
  bool bias;
};

class MatmulTest : public ::testing::TestWithParam<Case> {};

std::vector<float> RunMatmul(const std::vector<float>& x, int64_t m, const TestWeight& w,
                             const TestWeight* bias, ThreadPool* pool) {
  std::vector<float> y(m * w.rows, -1.0f);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = w.cols;
  p.w = w.ref();
  if (bias) p.bias = bias->ref();
  p.y = y.data();
  p.y_stride = w.rows;
  p.m = m;
  Matmul(p, pool);
  return y;
}

TEST_P(MatmulTest, MatchesDoubleReference) {
  const Case c = GetParam();
  std::mt19937 rng(42);
  TestWeight w = RandomWeight(c.dtype, c.n, c.k, &rng);
  TestWeight b = RandomWeight(c.dtype, 1, c.n, &rng);
  std::vector<float> x = RandomVector(c.m * c.k, &rng);
  ThreadPool pool(3);
  std::vector<float> y = RunMatmul(x, c.m, w, c.bias ? &b : nullptr, &pool);
  std::vector<double> ref = reference::Matmul(x, c.m, w, c.bias ? &b : nullptr);
  EXPECT_LT(RelError(y, ref), 1e-5) << "m=" << c.m << " n=" << c.n << " k=" << c.k;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulTest,
    ::testing::Values(Case{DType::kF32, 1, 8, 64, false}, Case{DType::kF32, 5, 37, 67, true},
                      Case{DType::kF32, 33, 130, 128, true}, Case{DType::kBF16, 1, 300, 96, false},
                      Case{DType::kBF16, 7, 19, 13, true}, Case{DType::kF16, 3, 41, 40, true},
                      Case{DType::kF16, 1, 1, 1, false}, Case{DType::kF32, 70, 9, 200, false}));

// A row's result must be bitwise identical whatever the batch around it, the
// row's position in it and the thread count.
TEST(MatmulBatchInvariance, RowIsBitwiseIndependentOfBatch) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(7);
    const int64_t n = 75, k = 131;
    TestWeight w = RandomWeight(dtype, n, k, &rng);
    TestWeight b = RandomWeight(dtype, 1, n, &rng);
    std::vector<float> row = RandomVector(k, &rng);
    std::vector<float> alone = RunMatmul(row, 1, w, &b, nullptr);
    ThreadPool pool(4);
    for (int64_t m : {2, 3, 4, 5, 8, 13, 70}) {
      for (int64_t at : {int64_t{0}, m / 2, m - 1}) {
        std::vector<float> x = RandomVector(m * k, &rng);
        std::memcpy(x.data() + at * k, row.data(), k * sizeof(float));
        std::vector<float> y = RunMatmul(x, m, w, &b, (m % 2) ? &pool : nullptr);
        ASSERT_EQ(0, std::memcmp(y.data() + at * n, alone.data(), n * sizeof(float)))
            << "m=" << m << " at=" << at << " dtype=" << models::DTypeName(dtype);
      }
    }
  }
}

TEST(MatmulTest, AccumulateAddsToOutputAndHonoursStrides) {
  std::mt19937 rng(3);
  TestWeight w = RandomWeight(DType::kF32, 6, 10, &rng);
  std::vector<float> x = RandomVector(2 * 16, &rng);  // stride 16, width 10
  std::vector<float> y(2 * 9, 1.0f);                  // stride 9, width 6
  MatmulParams p;
  p.x = x.data();
  p.x_stride = 16;
  p.w = w.ref();
  p.y = y.data();
  p.y_stride = 9;
  p.m = 2;
  p.accumulate = true;
  Matmul(p, nullptr);
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 9; ++c) {
      if (c >= 6) {
        EXPECT_EQ(y[r * 9 + c], 1.0f);
        continue;
      }
      double s = 1.0;
      for (int i = 0; i < 10; ++i) s += x[r * 16 + i] * w.exact[c * 10 + i];
      EXPECT_NEAR(y[r * 9 + c], s, 1e-5);
    }
  }
}

}  // namespace
}  // namespace expertd::engine::cpu
