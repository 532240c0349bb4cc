// The dense matmul's variants (matmul_dense.h): every variant bitwise equal
// to the scalar form of its dtype's sequence (reference_ops.h), the AVX-512
// kernel against the AVX2 one (bitwise) and against the double-precision
// reference.
#include "engine/backend/cpu/matmul_dense.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_unit.h"
#include "engine/backend/cpu/reference_ops.h"
#include "gtest/gtest.h"

namespace expertd::engine::cpu {
namespace {

using reference::RandomVector;
using reference::RandomWeight;
using reference::TestWeight;

struct Product {
  int64_t m, n, k;
  DType dtype;
  bool bias, accumulate;
};

std::string Describe(const Product& c, int threads) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " " + models::DTypeName(c.dtype) + (c.bias ? " bias" : "") +
         (c.accumulate ? " accumulate" : "") + " threads=" + std::to_string(threads);
}

// y starts as `y0` (read when accumulating); x has row stride k + 3 and y
// row stride n + 5 (strides other than the widths).
std::vector<float> RunDense(const Product& c, const std::vector<float>& x, const TestWeight& w,
                            const TestWeight& b, const std::vector<float>& y0, ThreadPool* pool,
                            CpuIsa isa) {
  std::vector<float> y = y0;
  MatmulParams p;
  p.x = x.data();
  p.x_stride = c.k + 3;
  p.w = w.ref();
  if (c.bias) p.bias = b.ref();
  p.y = y.data();
  p.y_stride = c.n + 5;
  p.m = c.m;
  p.accumulate = c.accumulate;
  DenseMatmul(p, pool, isa);
  return y;
}

class DenseMatmulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuSupports(CpuIsa::kAvx512)) GTEST_SKIP() << "the CPU lacks AVX-512";
  }
};

std::vector<Product> Products() {
  std::vector<Product> out;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 19, 77},
                           {2, 17, 33},
                           {3, 9, 31},
                           {4, 12, 8},
                           {5, 13, 7},
                           {7, 1, 1},
                           {16, 25, 64},
                           {33, 130, 131},
                           {70, 11, 13},
                           {9, 200, 96},
                           {130, 37, 40}}) {
      out.push_back({m, n, k, dtype, (m + n) % 2 == 0, false});
      out.push_back({m, n, k, dtype, true, true});
    }
  }
  return out;
}

// The AVX-512 kernel performs the AVX2 kernel's operations per element, so the
// two are bitwise equal (odd sizes, k tails, every column-pair / row tail,
// bias and accumulate, 1 and 2 threads). Within fp32 summation error of the
// double reference: |y - ref| <= 1e-5 * (sum_i |x_i w_i| + |bias| + |y0|),
// above the (k / 8 + 3) * 2^-24 bound of 8-lane sums for these k.
TEST_F(DenseMatmulTest, Avx512IsBitwiseAvx2AndNearTheReference) {
  ThreadPool two(2);
  for (const Product& c : Products()) {
    std::mt19937 rng(static_cast<uint32_t>(c.m * 1000 + c.n * 10 + c.k));
    TestWeight w = RandomWeight(c.dtype, c.n, c.k, &rng);
    TestWeight b = RandomWeight(c.dtype, 1, c.n, &rng);
    std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
    std::vector<float> y0 = RandomVector(c.m * (c.n + 5), &rng);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
      const int threads = pool == nullptr ? 1 : 2;
      std::vector<float> wide = RunDense(c, x, w, b, y0, pool, CpuIsa::kAvx512);
      std::vector<float> narrow = RunDense(c, x, w, b, y0, pool, CpuIsa::kAvx2);
      ASSERT_EQ(0, std::memcmp(wide.data(), narrow.data(), wide.size() * sizeof(float)))
          << Describe(c, threads);
      for (int64_t r = 0; r < c.m; ++r) {
        for (int64_t col = 0; col < c.n + 5; ++col) {
          const float got = wide[r * (c.n + 5) + col];
          if (col >= c.n) {  // past the width: untouched
            ASSERT_EQ(got, y0[r * (c.n + 5) + col]) << Describe(c, threads);
            continue;
          }
          double ref = 0, mag = 0;
          for (int64_t i = 0; i < c.k; ++i) {
            const double t = double{x[r * (c.k + 3) + i]} * w.exact[col * c.k + i];
            ref += t;
            mag += std::fabs(t);
          }
          if (c.bias) ref += b.exact[col], mag += std::fabs(b.exact[col]);
          if (c.accumulate)
            ref += y0[r * (c.n + 5) + col], mag += std::fabs(y0[r * (c.n + 5) + col]);
          ASSERT_LE(std::fabs(got - ref), 1e-5 * mag + 1e-30)
              << Describe(c, threads) << " r=" << r << " c=" << col;
        }
      }
    }
  }
}

// What the engine relies on: a row's result is bitwise the same alone (m = 1:
// the AVX2 decode tiles) as in any batch the AVX-512 kernel runs, wherever it
// sits, with 1 or 2 threads; and MatmulUnit over any split equals Matmul.
TEST_F(DenseMatmulTest, RowAloneEqualsRowInAnAvx512Batch) {
  ThreadPool two(2);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    std::mt19937 rng(11);
    const int64_t n = 77, k = 2051;
    TestWeight w = RandomWeight(dtype, n, k, &rng);
    TestWeight b = RandomWeight(dtype, 1, n, &rng);
    const Product one{1, n, k, dtype, true, false};
    std::vector<float> row = RandomVector(k + 3, &rng);
    std::vector<float> alone =
        RunDense(one, row, w, b, std::vector<float>(n + 5, 0.0f), nullptr, BestCpuIsa());
    for (int64_t m : {4, 5, 8, 17, 66}) {
      const Product batch{m, n, k, dtype, true, false};
      for (int64_t at : {int64_t{0}, m / 2, m - 1}) {
        std::vector<float> x = RandomVector(m * (k + 3), &rng);
        std::memcpy(x.data() + at * (k + 3), row.data(), k * sizeof(float));
        std::vector<float> y = RunDense(batch, x, w, b, std::vector<float>(m * (n + 5), 0.0f),
                                        (m % 2) ? &two : nullptr, CpuIsa::kAvx512);
        ASSERT_EQ(0, std::memcmp(y.data() + at * (n + 5), alone.data(), n * sizeof(float)))
            << "m=" << m << " at=" << at << " " << models::DTypeName(dtype);
      }
      // Units of odd shapes (as GroupedMatmul cuts them) give Matmul's bits.
      std::vector<float> x = RandomVector(m * (k + 3), &rng);
      std::vector<float> whole =
          RunDense(batch, x, w, b, std::vector<float>(m * (n + 5), 0.0f), nullptr, BestCpuIsa());
      std::vector<float> cut(m * (n + 5), 0.0f);
      MatmulParams p;
      p.x = x.data();
      p.x_stride = k + 3;
      p.w = w.ref();
      p.bias = b.ref();
      p.y = cut.data();
      p.y_stride = n + 5;
      p.m = m;
      for (int64_t r0 = 0; r0 < m; r0 += 7) {
        for (int64_t c0 = 0; c0 < n; c0 += 19)
          MatmulUnit(p, r0, std::min(m, r0 + 7), c0, std::min(n, c0 + 19));
      }
      ASSERT_EQ(0, std::memcmp(cut.data(), whole.data(), cut.size() * sizeof(float))) << "m=" << m;
    }
  }
}

// Every variant (the AVX2 and AVX-512 kernels through DenseMatmul, 1 and 2
// threads, and their units over odd row / column splits) gives bitwise the
// scalar sequence of the weights' dtype: m = 1..9 (every decode and tile row
// count), k below, at and around multiples of 8 and 32, bias, accumulate.
TEST(DenseSequenceTest, EveryVariantIsBitwiseTheScalarSequence) {
  ThreadPool two(2);
  std::vector<CpuIsa> isas = {CpuIsa::kAvx2};
  if (CpuSupports(CpuIsa::kAvx512)) isas.push_back(CpuIsa::kAvx512);
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
    for (int64_t m = 1; m <= 9; ++m) {
      for (int64_t k : {1, 5, 8, 17, 31, 32, 33, 64, 95, 131, 300}) {
        for (int64_t n : {1, 9, 29}) {
          const Product c{m, n, k, dtype, (m + k) % 2 == 0, (m + n + k) % 3 == 0};
          std::mt19937 rng(static_cast<uint32_t>(m * 7919 + k * 31 + n));
          TestWeight w = RandomWeight(dtype, n, k, &rng);
          TestWeight b = RandomWeight(dtype, 1, n, &rng);
          std::vector<float> x = RandomVector(m * (k + 3), &rng);
          std::vector<float> y0 = RandomVector(m * (n + 5), &rng);
          std::vector<float> want = y0;
          reference::DenseMatmulSequence(x.data(), k + 3, m, w, c.bias ? &b : nullptr,
                                         c.accumulate, want.data(), n + 5);
          for (CpuIsa isa : isas) {
            for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
              std::vector<float> got = RunDense(c, x, w, b, y0, pool, isa);
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                  << Describe(c, pool == nullptr ? 1 : 2) << " " << CpuIsaName(isa);
            }
            // Units over a split of rows (3) and columns (5), as GroupedMatmul
            // or the thread split may cut them.
            std::vector<float> cut = y0;
            MatmulParams p;
            p.x = x.data();
            p.x_stride = k + 3;
            p.w = w.ref();
            if (c.bias) p.bias = b.ref();
            p.y = cut.data();
            p.y_stride = n + 5;
            p.m = m;
            p.accumulate = c.accumulate;
            for (int64_t r0 = 0; r0 < m; r0 += 3) {
              for (int64_t c0 = 0; c0 < n; c0 += 5) {
                const int64_t r1 = std::min(m, r0 + 3), c1 = std::min(n, c0 + 5);
                if (isa == CpuIsa::kAvx512) {
                  internal::DenseMatmulUnitAvx512(p, r0, r1, c0, c1);
                } else {
                  internal::DenseMatmulUnitAvx2(p, r0, r1, c0, c1);
                }
              }
            }
            ASSERT_EQ(0, std::memcmp(cut.data(), want.data(), cut.size() * sizeof(float)))
                << Describe(c, 1) << " units " << CpuIsaName(isa);
          }
        }
      }
    }
  }
}

// The bf16 sequence's order is not the 8-lane one: the two give different
// bits on some element (so the tests above can tell them apart), both close
// to the exact sum.
TEST(DenseSequenceTest, Bf16SequenceDiffersFromThe8LaneOne) {
  std::mt19937 rng(5);
  const int64_t n = 64, k = 256;
  TestWeight w = RandomWeight(DType::kBF16, n, k, &rng);
  std::vector<float> x = RandomVector(k, &rng);
  int differ = 0;
  for (int64_t c = 0; c < n; ++c) {
    differ += reference::DenseDotBf16(x.data(), w, c) != reference::DenseDot8Lane(x.data(), w, c);
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace expertd::engine::cpu
