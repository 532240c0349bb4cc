// The block-scaled FP8 matmul variants against a scalar reference, against
// the fp32 kernel on the dequantized weights, and for batch invariance.
#include "engine/backend/cpu/matmul_fp8.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "gtest/gtest.h"
#include "models/dtype/dtype.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine::cpu {
namespace {

struct Fp8Weight {
  models::Fp8BlockShape shape;
  std::vector<uint8_t> codes;
  std::vector<float> scale;
  std::vector<float> dequantized;  // what an fp32 checkpoint of the same values holds

  WeightRef ref() const {
    WeightRef w{codes.data(), DType::kF8E4M3, shape.rows, shape.cols};
    w.quant = Fp8BlockQuant(scale.data(), shape.block_rows, shape.block_cols);
    return w;
  }
  WeightRef f32_ref() const {
    return WeightRef{dequantized.data(), DType::kF32, shape.rows, shape.cols};
  }
};

Fp8Weight MakeWeight(int64_t n, int64_t k, int64_t br, int64_t bc, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  Fp8Weight w;
  w.shape = models::Fp8BlockShape{n, k, br, bc};
  std::vector<float> src(n * k);
  for (float& v : src) v = dist(rng);
  src[0] = 1e-7f;  // a subnormal code in its block
  w.codes.resize(n * k);
  w.scale.resize(w.shape.scale_rows() * w.shape.scale_cols());
  models::QuantizeFp8Block(w.shape, src.data(), w.codes.data(), w.scale.data());
  w.dequantized.resize(n * k);
  models::DequantizeFp8Block(w.shape, w.codes.data(), w.scale.data(), w.dequantized.data());
  return w;
}

std::vector<float> RandomRows(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = dist(rng);
  return x;
}

std::vector<float> RunMm(const std::vector<float>& x, int64_t m, const WeightRef& w,
                         ThreadPool* pool, const Fp8Isa* isa,
                         const std::vector<float>* bias = nullptr) {
  std::vector<float> y(m * w.rows, 0.5f);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = w.cols;
  p.w = w;
  if (bias != nullptr) p.bias = WeightRef{bias->data(), DType::kF32, 1, w.rows};
  p.y = y.data();
  p.y_stride = w.rows;
  p.m = m;
  p.accumulate = bias != nullptr;
  if (isa != nullptr) {
    MatmulFp8(p, pool, *isa);
  } else {
    Matmul(p, pool);
  }
  return y;
}

// The scalar reference: dequantize element by element (DeepSeek's order) and
// sum in double.
std::vector<double> Reference(const std::vector<float>& x, int64_t m, const Fp8Weight& w) {
  const int64_t n = w.shape.rows, k = w.shape.cols;
  std::vector<double> y(m * n);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) {
        const float s =
            w.scale[(c / w.shape.block_rows) * w.shape.scale_cols() + j / w.shape.block_cols];
        acc += static_cast<double>(x[r * k + j]) *
               static_cast<double>(models::E4m3ToF32(w.codes[c * k + j]) * s);
      }
      y[r * n + c] = acc;
    }
  }
  return y;
}

std::vector<Fp8Isa> SupportedIsas() {
  std::vector<Fp8Isa> out = {Fp8Isa::kAvx2};
  if (BestFp8Isa() == Fp8Isa::kAvx512) out.push_back(Fp8Isa::kAvx512);
  return out;
}

struct Shape {
  int64_t m, n, k, br, bc;
};

TEST(MatmulFp8Test, EveryVariantMatchesTheScalarReference) {
  // Partial edge blocks in both dimensions; k tails under 8 and under 16;
  // blocks of 48 codes (not a multiple of 32).
  for (const Shape& s :
       {Shape{1, 200, 300, 128, 128}, Shape{5, 37, 133, 16, 32}, Shape{9, 64, 128, 128, 128},
        Shape{3, 17, 21, 8, 16}, Shape{4, 19, 200, 128, 48}}) {
    const Fp8Weight w = MakeWeight(s.n, s.k, s.br, s.bc, 7);
    const std::vector<float> x = RandomRows(s.m, s.k, 11);
    const std::vector<double> ref = Reference(x, s.m, w);
    for (Fp8Isa isa : SupportedIsas()) {
      const std::vector<float> y = RunMm(x, s.m, w.ref(), nullptr, &isa);
      for (size_t i = 0; i < y.size(); ++i) {
        EXPECT_NEAR(y[i], ref[i], 1e-5 * (1.0 + std::fabs(ref[i])))
            << Fp8IsaName(isa) << " m=" << s.m << " n=" << s.n << " k=" << s.k << " at " << i;
      }
    }
  }
}

TEST(MatmulFp8Test, Avx2IsBitwiseTheFp32KernelOnTheDequantizedWeights) {
  const Fp8Weight w = MakeWeight(96, 259, 128, 128, 3);
  const std::vector<float> x = RandomRows(6, 259, 5);
  const Fp8Isa avx2 = Fp8Isa::kAvx2;
  const std::vector<float> fp8 = RunMm(x, 6, w.ref(), nullptr, &avx2);
  const std::vector<float> f32 = RunMm(x, 6, w.f32_ref(), nullptr, nullptr);
  ASSERT_EQ(fp8.size(), f32.size());
  EXPECT_EQ(std::memcmp(fp8.data(), f32.data(), fp8.size() * sizeof(float)), 0);
}

TEST(MatmulFp8Test, BatchAndThreadInvariant) {
  const Fp8Weight w = MakeWeight(150, 384, 128, 128, 9);
  const std::vector<float> x = RandomRows(11, 384, 13);
  ThreadPool pool(3);
  for (Fp8Isa isa : SupportedIsas()) {
    const std::vector<float> all = RunMm(x, 11, w.ref(), &pool, &isa);
    for (int64_t r = 0; r < 11; ++r) {
      std::vector<float> one(x.begin() + r * 384, x.begin() + (r + 1) * 384);
      const std::vector<float> y = RunMm(one, 1, w.ref(), nullptr, &isa);
      EXPECT_EQ(std::memcmp(y.data(), all.data() + r * 150, 150 * sizeof(float)), 0)
          << Fp8IsaName(isa) << " row " << r;
    }
  }
}

TEST(MatmulFp8Test, RowSliceUsesItsParentsScaleGridAndBiasAccumulates) {
  const Fp8Weight w = MakeWeight(300, 256, 128, 128, 17);
  const std::vector<float> x = RandomRows(2, 256, 19);
  std::vector<float> bias(50);
  for (int i = 0; i < 50; ++i) bias[i] = 0.01f * i;
  const std::vector<double> ref = Reference(x, 2, w);
  WeightRef slice = w.ref();  // rows [110, 160): straddles the block edge at 128
  slice.data = w.codes.data() + 110 * 256;
  slice.rows = 50;
  slice.quant.row0 = 110;
  for (Fp8Isa isa : SupportedIsas()) {
    const std::vector<float> y = RunMm(x, 2, slice, nullptr, &isa, &bias);
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < 50; ++c) {
        const double want = 0.5 + (ref[r * 300 + 110 + c] + bias[c]);
        EXPECT_NEAR(y[r * 50 + c], want, 1e-5 * (1.0 + std::fabs(want))) << r << "," << c;
      }
    }
  }
}

// k = 32: a few of the tiles' steps (8 codes in AVX2, 16 in AVX-512);
// k = 256: many, NaN codes at either end of a step.
TEST(MatmulFp8Test, NanCodesGiveNan) {
  for (int64_t k : {32, 256}) {
    Fp8Weight w = MakeWeight(10, k, 128, 128, 1);
    w.codes[1 * k + 5] = 0x7f;
    w.codes[3 * k + k - 1] = 0xff;
    w.codes[9 * k + k / 2] = 0x7f;
    const std::vector<float> x = RandomRows(1, k, 2);
    for (Fp8Isa isa : SupportedIsas()) {
      const std::vector<float> y = RunMm(x, 1, w.ref(), nullptr, &isa);
      for (int64_t c = 0; c < 10; ++c) {
        EXPECT_EQ(std::isnan(y[c]), c == 1 || c == 3 || c == 9)
            << Fp8IsaName(isa) << " k=" << k << " column " << c;
      }
    }
  }
}

}  // namespace
}  // namespace expertd::engine::cpu
