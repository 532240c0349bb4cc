// The int8-activation quantized matmul (MatmulActivations::kInt8): bitwise
// its scalar sequence (reference_ops.h QuantDotInt8Activations) for every
// format, group size, m, column count, split and thread count, on codes as
// QuantizeWeights writes them and on arbitrary bytes; GroupedMatmul equals
// one Matmul per group; near the fp32 product; NaN / inf in x reach the
// output; other weights keep their kBF16 / kF32 sequences. The kernel is the
// CPU's: quant_matmul_avx512vnni.cc with AVX-512-VNNI, else
// quant_matmul_avx2_int8.cc (the _avx2 target runs this file under
// EXPERTD_CPU_ISA=avx2, so an AVX-512 machine checks both).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
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

// Codes and scales of one [n, k] weight.
using Quantized = reference::QuantizedWeight;
using reference::TestQuantFormat;

Quantized Quantize(WeightFormat f, int group, int64_t n, int64_t k, uint32_t seed) {
  Quantized q;
  EXPECT_TRUE(reference::QuantizeRandomWeight(f, group, n, k, seed, &q).ok());
  return q;
}

// Every byte value a file may hold (int8 -128, int4 -8, mxfp4 -0) and
// scales over a wide range.
Quantized ArbitraryCodes(WeightFormat f, int group, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  Quantized q;
  WeightQuant wq = TestQuantFormat(f, group);
  q.values.resize(QuantValueBytes(f, n, k));
  for (uint8_t& v : q.values) v = static_cast<uint8_t>(rng());
  q.scales.resize(QuantScaleBytes(wq, n, k));
  for (size_t i = 0; i < q.scales.size(); ++i) {
    if (f == WeightFormat::kMxfp4) {
      q.scales[i] = static_cast<uint8_t>(100 + rng() % 40);  // 2^-27 .. 2^12
    } else if (i % 2 == 1) {
      q.scales[i] = static_cast<uint8_t>(0x10 + rng() % 0x48);  // fp16 high byte: 2^-11 .. 2^6
    } else {
      q.scales[i] = static_cast<uint8_t>(rng());
    }
  }
  wq.scales = q.scales.data();
  q.ref = WeightRef{q.values.data(), DType::kBF16, n, k, wq};
  return q;
}

struct Case {
  int64_t m, n, k;
  bool bias, accumulate;
  std::string Describe() const {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           (bias ? " bias" : "") + (accumulate ? " accumulate" : "");
  }
};

// x row stride k + 3, y row stride n + 5.
MatmulParams Params(const Case& c, const std::vector<float>& x, const WeightRef& w,
                    const TestWeight& b, std::vector<float>* y) {
  MatmulParams p;
  p.x = x.data();
  p.x_stride = c.k + 3;
  p.w = w;
  if (c.bias) p.bias = b.ref();
  p.y = y->data();
  p.y_stride = c.n + 5;
  p.m = c.m;
  p.accumulate = c.accumulate;
  p.activations = MatmulActivations::kInt8;
  return p;
}

// The scalar sequence for every element, y0 as y on entry.
std::vector<float> Expected(const Case& c, const std::vector<float>& x, const Quantized& q,
                            const TestWeight& b, const std::vector<float>& y0) {
  std::vector<float> want = y0;
  for (int64_t r = 0; r < c.m; ++r) {
    for (int64_t col = 0; col < c.n; ++col) {
      float v = reference::QuantDotInt8Activations(x.data() + r * (c.k + 3), q.values.data(),
                                                   q.ref.quant, c.k, col);
      if (c.bias) v = v + static_cast<float>(b.exact[col]);
      float& out = want[r * (c.n + 5) + col];
      out = c.accumulate ? out + v : v;
    }
  }
  return want;
}

class Int8ActivationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuSupportsInt8Activations()) GTEST_SKIP() << "EXPERTD_CPU_ISA caps the CPU to scalar";
    std::cout << "int8 kernel: " << (CpuSupportsInt8Dot() ? "avx512-vnni" : "avx2") << "\n";
  }

  // Matmul on 1 and 2 threads, and units over a split of rows (3) and
  // columns (5, as GroupedMatmul may cut them), all bitwise `want`.
  static void ExpectEveryPathGives(const Case& c, const std::vector<float>& x, const Quantized& q,
                                   const TestWeight& b, const std::vector<float>& y0,
                                   const std::vector<float>& want, const std::string& what) {
    ThreadPool two(2);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
      std::vector<float> got = y0;
      Matmul(Params(c, x, q.ref, b, &got), pool);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << what << " threads=" << (pool == nullptr ? 1 : 2);
    }
    std::vector<float> cut = y0;
    const MatmulParams p = Params(c, x, q.ref, b, &cut);
    for (int64_t r0 = 0; r0 < c.m; r0 += 3) {
      for (int64_t c0 = 0; c0 < c.n; c0 += 5)
        MatmulUnit(p, r0, std::min(c.m, r0 + 3), c0, std::min(c.n, c0 + 5));
    }
    ASSERT_EQ(0, std::memcmp(cut.data(), want.data(), cut.size() * sizeof(float)))
        << what << " units";
  }
};

// Decode and every tile row count (m = 1..9), prefill sizes; column counts
// below, at and past the 16-lane blocks and 32-column tiles.
TEST_F(Int8ActivationsTest, EveryPathIsBitwiseTheScalarSequence) {
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kMxfp4}) {
    for (int g : {32, 64, 128}) {
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 29, 256},
                             // one row over several pieces of scales (8 fp16
                             // or 16 E8M0 groups: the one-row kernel's window)
                             {1, 29, 1024},
                             {1, 35, 768},
                             {2, 7, 128},
                             {3, 16, 384},
                             {4, 33, 256},
                             {5, 1, 128},
                             {9, 70, 512},
                             {70, 17, 256},
                             {130, 32, 128}}) {
        const Case c{m, n, k, (m + n) % 2 == 0, m % 3 == 0};
        const std::string what =
            std::string(WeightFormatName(f)) + " g" + std::to_string(g) + " " + c.Describe();
        const Quantized q = Quantize(f, g, n, k, static_cast<uint32_t>(m * 131 + n + g));
        std::mt19937 rng(static_cast<uint32_t>(k + g));
        const TestWeight b = RandomWeight(DType::kBF16, 1, n, &rng);
        const std::vector<float> x = RandomVector(m * (k + 3), &rng);
        const std::vector<float> y0 = RandomVector(m * (n + 5), &rng);
        ExpectEveryPathGives(c, x, q, b, y0, Expected(c, x, q, b, y0), what);
      }
    }
  }
}

// Arbitrary code bytes (the extremes included) and scales, and x with zero
// blocks, tiny blocks and a wide dynamic range.
TEST_F(Int8ActivationsTest, ArbitraryCodesAndActivationsAreBitwiseTheScalarSequence) {
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kMxfp4}) {
    for (auto [g, m, k] : {std::tuple<int, int64_t, int64_t>{32, 11, 512},
                           {128, 11, 512},
                           {32, 1, 160},  // an odd number of 32-blocks, one row
                           {128, 1, 384},
                           // rows whose last 128-value chunk of x holds 1, 2
                           // or 3 blocks (the 4-bit layout), one row and panels
                           {32, 1, 32},
                           {64, 1, 192},
                           {32, 1, 224},
                           {32, 5, 224},
                           {64, 2, 320},
                           // one row over several pieces of scales
                           {32, 1, 1024},
                           {64, 1, 1536}}) {
      const Case c{m, 37, k, true, false};
      const Quantized q = ArbitraryCodes(f, g, c.n, c.k, static_cast<uint32_t>(g));
      std::mt19937 rng(7);
      const TestWeight b = RandomWeight(DType::kBF16, 1, c.n, &rng);
      std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
      std::uniform_int_distribution<int> exponent(-30, 30);
      for (float& v : x) v = std::ldexp(v, exponent(rng));
      for (int64_t i = 0; i < 32 && c.k >= 128; ++i) {
        x[(2 % c.m) * (c.k + 3) + 64 + i] = 0.0f;               // a zero block
        x[(3 % c.m) * (c.k + 3) + 96 + i] = 1e-39f * (i - 16);  // d below FLT_MIN
      }
      const std::vector<float> y0(c.m * (c.n + 5), 0.0f);
      ExpectEveryPathGives(
          c, x, q, b, y0, Expected(c, x, q, b, y0),
          std::string(WeightFormatName(f)) + " g" + std::to_string(g) + " " + c.Describe());
    }
  }
}

// A NaN or an infinity in a row's x makes that row's outputs non-finite
// (quantizing must not hide it) and leaves the other rows alone.
TEST_F(Int8ActivationsTest, NonFiniteActivationsReachTheOutput) {
  const Case c{3, 20, 128, false, false};
  const Quantized q = Quantize(WeightFormat::kInt4, 32, c.n, c.k, 3);
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::mt19937 rng(5);
    std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
    x[1 * (c.k + 3) + 40] = bad;
    std::vector<float> y(c.m * (c.n + 5), 0.0f);
    Matmul(Params(c, x, q.ref, TestWeight(), &y), nullptr);
    for (int64_t col = 0; col < c.n; ++col) {
      EXPECT_TRUE(std::isfinite(y[0 * (c.n + 5) + col])) << col;
      EXPECT_FALSE(std::isfinite(y[1 * (c.n + 5) + col])) << col;
      EXPECT_TRUE(std::isfinite(y[2 * (c.n + 5) + col])) << col;
    }
  }
}

// GroupedMatmul (three experts: 0, 9 and 70 rows) gives one Matmul per
// group's bits; a row alone gives its bits inside a batch.
TEST_F(Int8ActivationsTest, GroupsEqualMatmulsAndRowsAreBatchInvariant) {
  ThreadPool two(2);
  const int64_t n = 45, k = 256;
  std::vector<Quantized> qs;
  for (int g = 0; g < 3; ++g) qs.push_back(Quantize(WeightFormat::kInt4, 32, n, k, 20 + g));
  const std::vector<int64_t> offset = {0, 0, 9, 79};
  std::mt19937 rng(13);
  const std::vector<float> x = RandomVector(79 * (k + 3), &rng);
  std::vector<WeightRef> refs;
  for (const Quantized& q : qs) refs.push_back(q.ref);
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
  g.activations = MatmulActivations::kInt8;
  GroupedMatmul(g, &two);
  std::vector<float> each(79 * (n + 5), 0.0f);
  for (int grp = 1; grp < 3; ++grp) {
    const int64_t rows = offset[grp + 1] - offset[grp];
    std::vector<float> xs(x.begin() + offset[grp] * (k + 3), x.begin() + offset[grp + 1] * (k + 3));
    std::vector<float> ys(rows * (n + 5), 0.0f);
    Matmul(Params({rows, n, k, false, false}, xs, qs[grp].ref, TestWeight(), &ys), nullptr);
    std::copy(ys.begin(), ys.end(), each.begin() + offset[grp] * (n + 5));
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> row(xs.begin() + r * (k + 3), xs.begin() + (r + 1) * (k + 3));
      std::vector<float> alone(n + 5, 0.0f);
      Matmul(Params({1, n, k, false, false}, row, qs[grp].ref, TestWeight(), &alone), nullptr);
      ASSERT_EQ(0, std::memcmp(alone.data(), ys.data() + r * (n + 5), n * sizeof(float)))
          << "group " << grp << " row " << r;
    }
  }
  ASSERT_EQ(0, std::memcmp(grouped.data(), each.data(), each.size() * sizeof(float)));
}

// Within the int8 rounding of x of the fp32-activation result (per element
// at most half a step of its block, d / 2, times |code * scale|), and not
// equal to it: x really is quantized.
TEST_F(Int8ActivationsTest, NearTheFp32ActivationProduct) {
  const Case c{17, 40, 1024, false, false};
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4, WeightFormat::kMxfp4}) {
    const Quantized q = Quantize(f, 32, c.n, c.k, 9);
    std::mt19937 rng(2);
    const std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
    std::vector<float> got(c.m * (c.n + 5), 0.0f), fp32(got.size(), 0.0f);
    MatmulParams p = Params(c, x, q.ref, TestWeight(), &got);
    Matmul(p, nullptr);
    p.y = fp32.data();
    p.activations = MatmulActivations::kF32;
    Matmul(p, nullptr);
    int differ = 0;
    for (int64_t r = 0; r < c.m; ++r) {
      for (int64_t col = 0; col < c.n; ++col) {
        double bound = 0;
        const uint8_t* codes = q.values.data() + col * QuantValueBytes(f, 1, c.k);
        for (int64_t blk = 0; blk < c.k / 32; ++blk) {
          double amax = 0;
          for (int i = 0; i < 32; ++i)
            amax = std::max<double>(amax, std::fabs(x[r * (c.k + 3) + 32 * blk + i]));
          const double scale =
              LoadScaleF32(q.ref.quant.scales, q.ref.quant.scale_dtype, col * (c.k / 32) + blk);
          for (int i = 0; i < 32; ++i)
            bound += amax / 254.0 * std::fabs(DecodeQuantValue(f, codes, 32 * blk + i) * scale);
        }
        const float v = got[r * (c.n + 5) + col], ref = fp32[r * (c.n + 5) + col];
        ASSERT_LE(std::fabs(v - ref), bound * 1.01 + 1e-6)
            << WeightFormatName(f) << " r=" << r << " c=" << col;
        differ += v != ref;
      }
    }
    EXPECT_GT(differ, c.m * c.n / 2) << WeightFormatName(f);
  }
}

// Dense bf16 weights run the bf16-activation sequence (the fp32 one on a CPU
// without a bf16 dot product), fp32 weights the fp32 one, and quantized
// weights the int8 kernel does not take (int8 with groups of 16, FP8 blocks)
// the fp32-activation kernels: bitwise those modes.
TEST_F(Int8ActivationsTest, OtherWeightsKeepTheirSequences) {
  const Case c{6, 21, 96, true, true};
  std::mt19937 rng(4);
  const std::vector<float> x = RandomVector(c.m * (c.k + 3), &rng);
  const std::vector<float> y0 = RandomVector(c.m * (c.n + 5), &rng);
  const TestWeight b = RandomWeight(DType::kBF16, 1, c.n, &rng);
  const TestWeight bf16 = RandomWeight(DType::kBF16, c.n, c.k, &rng);
  const TestWeight f32 = RandomWeight(DType::kF32, c.n, c.k, &rng);
  const Quantized g16 = Quantize(WeightFormat::kInt8, 16, c.n, c.k, 6);
  const std::vector<std::tuple<WeightRef, MatmulActivations, std::string>> cases = {
      {bf16.ref(), CpuSupportsBf16Dot() ? MatmulActivations::kBF16 : MatmulActivations::kF32,
       "bf16 weights"},
      {f32.ref(), MatmulActivations::kF32, "fp32 weights"},
      {g16.ref, MatmulActivations::kF32, "int8 g16"}};
  for (const auto& [w, same_as, what] : cases) {
    std::vector<float> int8 = y0, other = y0;
    MatmulParams p = Params(c, x, w, b, &int8);
    Matmul(p, nullptr);
    p.y = other.data();
    p.activations = same_as;
    Matmul(p, nullptr);
    ASSERT_EQ(0, std::memcmp(int8.data(), other.data(), int8.size() * sizeof(float))) << what;
  }
}

}  // namespace
}  // namespace expertd::engine::cpu
