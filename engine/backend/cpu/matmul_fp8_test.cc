// The block-scaled FP8 matmul variants against a scalar reference, against
// the fp32 kernel on the dequantized weights, and for batch invariance; with
// bf16 activations, the bf16 dot-product kernel against its scalar sequence.
#include "engine/backend/cpu/matmul_fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_unit.h"
#include "engine/backend/cpu/reference_ops.h"
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

// With bf16 (or int8) activations, FP8 blocks of 32, 64 or 128 columns that
// divide k run the bf16 dot-product kernel (quant_matmul_avx512bf16.cc).
class Fp8Bf16ActivationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuSupportsQuantBf16Dot()) GTEST_SKIP() << "the CPU lacks AVX-512-BF16 or VBMI";
  }
};

// y = x . w^T for m rows of x (stride k) into y (stride n), with `activations`.
MatmulParams Params(const std::vector<float>& x, int64_t m, const WeightRef& w,
                    std::vector<float>* y, MatmulActivations activations) {
  MatmulParams p;
  p.x = x.data();
  p.x_stride = w.cols;
  p.w = w;
  p.y = y->data();
  p.y_stride = w.rows;
  p.m = m;
  p.activations = activations;
  return p;
}

// Every code but the NaNs (0x7f, 0xff) somewhere in the weight, so each
// entry of the kernel's E4M3 -> bf16 table meets the reference's E4m3ToF32.
void SpreadEveryCode(Fp8Weight* w) {
  int code = 0;
  for (uint8_t& c : w->codes) {
    c = static_cast<uint8_t>(code);
    code = (code + 37) % 256;  // 37 is prime to 256: every byte in turn
    if ((c & 0x7f) == 0x7f) c = 0x3c;
  }
}

// Matmul (1 and 2 threads; bf16 and int8 activations) and units over odd
// splits: bitwise the scalar sequence (reference_ops.h), and within 1e-5 of
// the double-precision product of the bf16-rounded x. Decode and prefill row
// counts, 2-D blocks of several shapes, a row slice straddling a block edge.
TEST_F(Fp8Bf16ActivationsTest, BitwiseTheScalarSequence) {
  ThreadPool two(2);
  struct Case {
    int64_t m, n, k, br, bc, first_row;
  };
  for (const Case& s : {Case{1, 29, 256, 16, 32, 0}, Case{2, 7, 128, 128, 64, 0},
                        Case{3, 13, 384, 128, 128, 0}, Case{4, 6, 256, 16, 128, 0},
                        Case{9, 31, 512, 128, 128, 110}, Case{70, 17, 192, 8, 64, 3}}) {
    Fp8Weight w = MakeWeight(s.first_row + s.n, s.k, s.br, s.bc, static_cast<uint32_t>(s.m + s.k));
    SpreadEveryCode(&w);
    WeightRef ref = w.ref();  // rows [first_row, first_row + n) of the weight
    ref.data = w.codes.data() + s.first_row * s.k;
    ref.rows = s.n;
    ref.quant.row0 = s.first_row;
    const std::string what = "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                             " k=" + std::to_string(s.k) + " block " + std::to_string(s.br) + "x" +
                             std::to_string(s.bc) + " row0=" + std::to_string(s.first_row);
    const std::vector<float> x = RandomRows(s.m, s.k, 23);
    std::vector<float> bias(s.n);
    for (int64_t c = 0; c < s.n; ++c) bias[c] = 0.01f * static_cast<float>(c);
    const bool with_bias = s.m % 2 == 1;
    std::vector<float> want(s.m * s.n);
    for (int64_t r = 0; r < s.m; ++r) {
      for (int64_t c = 0; c < s.n; ++c) {
        const float v = reference::QuantDotBf16Activations(
            x.data() + r * s.k, static_cast<const uint8_t*>(ref.data), ref.quant, s.k, c);
        want[r * s.n + c] = 0.5f + (with_bias ? v + bias[c] : v);
        double exact = 0;
        for (int64_t i = 0; i < s.k; ++i) {
          const int64_t row = s.first_row + c;
          const float scale = w.scale[(row / s.br) * w.shape.scale_cols() + i / s.bc];
          exact += static_cast<double>(reference::RoundToBf16(x[r * s.k + i])) *
                   models::E4m3ToF32(w.codes[row * s.k + i]) * scale;
        }
        EXPECT_NEAR(v, exact, 1e-5 * (1.0 + std::fabs(exact))) << what << " at " << r << "," << c;
      }
    }
    for (MatmulActivations act : {MatmulActivations::kBF16, MatmulActivations::kInt8}) {
      if (act == MatmulActivations::kInt8 && !CpuSupportsInt8Dot()) continue;
      const char* act_name = act == MatmulActivations::kInt8 ? "int8" : "bf16";
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
        std::vector<float> got(s.m * s.n, 0.5f);
        MatmulParams p = Params(x, s.m, ref, &got, act);
        if (with_bias) p.bias = WeightRef{bias.data(), DType::kF32, 1, s.n};
        p.accumulate = true;
        Matmul(p, pool);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << what << " " << act_name << " threads=" << (pool ? 2 : 1);
        if (pool != nullptr) continue;
        std::fill(got.begin(), got.end(), 0.5f);
        for (int64_t r0 = 0; r0 < s.m; r0 += 3) {
          for (int64_t c0 = 0; c0 < s.n; c0 += 5)
            MatmulUnit(p, r0, std::min(s.m, r0 + 3), c0, std::min(s.n, c0 + 5));
        }
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << what << " " << act_name << " units";
      }
    }
  }
}

// A NaN code poisons its column in decode and prefill, wherever it lies in
// its 32-code step.
TEST_F(Fp8Bf16ActivationsTest, NanCodesGiveNan) {
  const int64_t k = 256;
  Fp8Weight w = MakeWeight(10, k, 128, 128, 1);
  w.codes[1 * k + 5] = 0x7f;
  w.codes[3 * k + k - 1] = 0xff;
  w.codes[9 * k + 64 + 31] = 0x7f;
  for (int64_t m : {1, 5}) {
    const std::vector<float> x = RandomRows(m, k, 2);
    std::vector<float> y(m * 10);
    Matmul(Params(x, m, w.ref(), &y, MatmulActivations::kBF16), nullptr);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < 10; ++c) {
        EXPECT_EQ(std::isnan(y[r * 10 + c]), c == 1 || c == 3 || c == 9)
            << "m=" << m << " row " << r << " column " << c;
      }
    }
  }
}

// Blocks the bf16 kernel does not take (48 columns; 128 columns not dividing
// k) keep the fp32-activation FP8 kernel: bitwise the kF32 result.
TEST_F(Fp8Bf16ActivationsTest, OtherBlocksIgnoreTheMode) {
  for (auto [k, bc] : {std::pair<int64_t, int64_t>{192, 48}, {300, 128}}) {
    const Fp8Weight w = MakeWeight(21, k, 128, bc, 4);
    const std::vector<float> x = RandomRows(3, k, 6);
    std::vector<float> bf(3 * 21), f32(3 * 21);
    Matmul(Params(x, 3, w.ref(), &bf, MatmulActivations::kBF16), nullptr);
    Matmul(Params(x, 3, w.ref(), &f32, MatmulActivations::kF32), nullptr);
    EXPECT_EQ(0, std::memcmp(bf.data(), f32.data(), bf.size() * sizeof(float)))
        << "k=" << k << " block columns " << bc;
  }
}

}  // namespace
}  // namespace expertd::engine::cpu
