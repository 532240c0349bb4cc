#include "engine/backend/weight_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "models/dtype/dtype.h"
#include "models/dtype/fp8_block.h"

namespace expertd::engine {
namespace {

WeightQuant Quant(WeightFormat f, int group, ScaleDType s) {
  WeightQuant q;
  q.format = f;
  q.group_size = group;
  q.scale_dtype = s;
  return q;
}

struct Quantized {
  std::vector<uint8_t> values, scales;
  std::vector<float> dequantized;
};

Quantized RoundTrip(const std::vector<float>& w, int64_t rows, int64_t cols, WeightQuant q) {
  Quantized out;
  out.values.resize(QuantValueBytes(q.format, rows, cols));
  out.scales.resize(QuantScaleBytes(q, rows, cols));
  EXPECT_TRUE(QuantizeWeights(w.data(), rows, cols, q, out.values.data(), out.scales.data()).ok());
  q.scales = out.scales.data();
  out.dequantized.resize(w.size());
  DequantizeWeights(out.values.data(), q, rows, cols, out.dequantized.data());
  return out;
}

std::vector<float> RandomWeights(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(n);
  for (float& v : w) v = d(rng);
  return w;
}

// |w - dequant(w)| is at most half a quantization step of its group.
TEST(WeightQuantizeTest, IntegerFormatsRoundToNearestWithinHalfAStep) {
  const int64_t rows = 6, cols = 256;
  const std::vector<float> w = RandomWeights(rows * cols, 1);
  for (auto [f, qmax] : {std::pair{WeightFormat::kInt8, 127.0f}}) {
    for (int group : {32, 128}) {
      Quantized r = RoundTrip(w, rows, cols, Quant(f, group, ScaleDType::kF16));
      for (int64_t row = 0; row < rows; ++row) {
        for (int64_t g = 0; g < cols / group; ++g) {
          float amax = 0;
          for (int64_t c = g * group; c < (g + 1) * group; ++c)
            amax = std::max(amax, std::fabs(w[row * cols + c]));
          const float step = amax / qmax;
          for (int64_t c = g * group; c < (g + 1) * group; ++c) {
            const int64_t i = row * cols + c;
            // + the fp16 rounding of the scale (relative 2^-11 of amax).
            EXPECT_LE(std::fabs(w[i] - r.dequantized[i]), 0.5f * step + amax * 1e-3f)
                << WeightFormatName(f) << " g" << group << " at " << i;
          }
        }
      }
    }
  }
}

// Squared error of one group of w on the int4 grid `scale` x [lo, 7]
// (round to nearest even, clamped), scale rounded to fp16 first.
double Int4GridError(const float* w, int n, float scale, float lo) {
  const float s = models::F16ToF32(models::F32ToF16(scale));
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const float q = s == 0 ? 0 : std::clamp(std::nearbyint(w[i] / s), lo, 7.0f);
    err += (static_cast<double>(w[i]) - q * s) * (static_cast<double>(w[i]) - q * s);
  }
  return err;
}

// int4 searches its scale: no group is worse than the symmetric [-7, 7]
// grid (amax / 7) or llama.cpp Q4_0's (signed extreme / -8 over [-8, 7]),
// and over Gaussian weights the error is well below the [-7, 7] grid's.
TEST(WeightQuantizeTest, Int4ScaleSearchBeatsBothFixedGrids) {
  const int64_t rows = 64, cols = 256;
  const std::vector<float> w = RandomWeights(rows * cols, 3);
  for (int group : {32, 128}) {
    Quantized r = RoundTrip(w, rows, cols, Quant(WeightFormat::kInt4, group, ScaleDType::kF16));
    double ours = 0, symmetric = 0, q4_0 = 0;
    for (int64_t g0 = 0; g0 < rows * cols; g0 += group) {
      const float* v = w.data() + g0;
      float amax = 0, extreme = 0;
      for (int i = 0; i < group; ++i) {
        if (std::fabs(v[i]) > amax) {
          amax = std::fabs(v[i]);
          extreme = v[i];
        }
      }
      double mine = 0;
      for (int i = 0; i < group; ++i) {
        const double d = static_cast<double>(v[i]) - r.dequantized[g0 + i];
        mine += d * d;
      }
      const double sym = Int4GridError(v, group, amax / 7.0f, -7.0f);
      const double q4 = Int4GridError(v, group, -extreme / 8.0f, -8.0f);
      EXPECT_LE(mine, sym * (1 + 1e-9)) << "g" << group << " group at " << g0;
      EXPECT_LE(mine, q4 * (1 + 1e-9)) << "g" << group << " group at " << g0;
      ours += mine, symmetric += sym, q4_0 += q4;
    }
    std::printf("int4-g%d squared error: %.4g searched, %.4g [-7, 7] grid, %.4g Q4_0 grid\n",
                group, ours, symmetric, q4_0);
    EXPECT_LT(ours, 0.9 * symmetric) << "g" << group;
    EXPECT_LE(ours, q4_0) << "g" << group;
  }
}

TEST(WeightQuantizeTest, Int4UsesTheSixteenthLevel) {
  // Extreme -8 with a +7 in the group: the scale -(-8) / 8 = 1 puts both on
  // the grid exactly (code -8 = nibble 0x8); amax / 7 could not.
  std::vector<float> w(32, 0.0f);
  w[0] = -8, w[1] = 7, w[2] = 3;
  Quantized r = RoundTrip(w, 1, 32, Quant(WeightFormat::kInt4, 32, ScaleDType::kF32));
  EXPECT_EQ(r.values[0], 0x78);  // (-8 & 0xF) | 7 << 4
  EXPECT_EQ(r.dequantized, w);
}

TEST(WeightQuantizeTest, Int4PacksTheEvenColumnInTheLowNibble) {
  // One group of 32: amax 7 -> scale 1, codes are the values themselves.
  std::vector<float> w(32, 0.0f);
  w[0] = 7, w[1] = -7, w[2] = 3, w[3] = -1;
  Quantized r = RoundTrip(w, 1, 32, Quant(WeightFormat::kInt4, 32, ScaleDType::kF32));
  EXPECT_EQ(r.values[0], 0x97);  // 7 | (-7 & 0xF) << 4
  EXPECT_EQ(r.values[1], 0xF3);  // 3 | (-1 & 0xF) << 4
  EXPECT_EQ(r.dequantized, w);
}

TEST(WeightQuantizeTest, Mxfp4MatchesTheOcpEncoding) {
  // amax 6 -> exponent floor(log2 6) - 2 = 0 -> scale 1 (e8m0 byte 127);
  // every e2m1 value is exact.
  std::vector<float> w(32, 0.0f);
  for (int c = 0; c < 16; ++c) w[c] = kE2m1Values[c];
  Quantized r = RoundTrip(w, 1, 32, Quant(WeightFormat::kMxfp4, 32, ScaleDType::kE8M0));
  EXPECT_EQ(r.scales[0], 127);
  EXPECT_EQ(r.values[0], 0x10);  // codes 0 (low) and 1 (high)
  EXPECT_EQ(r.values[7], 0xFE);  // codes 14 and 15
  for (int c = 0; c < 32; ++c) EXPECT_EQ(r.dequantized[c], w[c]) << c;
  // 2.4 -> 2 and 2.6 -> 3 (nearest), 5 -> 4 (tie, to the even code 6 = 4.0),
  // 7 saturates at 6.
  std::vector<float> v(32, 0.0f);
  v[0] = 2.4f, v[1] = 2.6f, v[2] = 5.0f, v[3] = 7.0f;
  r = RoundTrip(v, 1, 32, Quant(WeightFormat::kMxfp4, 32, ScaleDType::kE8M0));
  EXPECT_EQ(r.dequantized[0], 2.0f);
  EXPECT_EQ(r.dequantized[1], 3.0f);
  EXPECT_EQ(r.dequantized[2], 4.0f);
  EXPECT_EQ(r.dequantized[3], 6.0f);
}

TEST(WeightQuantizeTest, ZeroBlocksAndTwoDimensionalBlocks) {
  std::vector<float> w(4 * 64, 0.0f);
  for (int c = 0; c < 64; ++c) w[2 * 64 + c] = 0.01f * (c - 32);
  WeightQuant q = Quant(WeightFormat::kInt8, 32, ScaleDType::kF32);
  q.block_rows = 2;  // rows {0,1} share scales, {2,3} too
  Quantized r = RoundTrip(w, 4, 64, q);
  ASSERT_EQ(r.scales.size(), 2u * 2u * sizeof(float));
  const float* s = reinterpret_cast<const float*>(r.scales.data());
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_FLOAT_EQ(s[2], 0.32f / 127);
  for (int c = 0; c < 128; ++c) EXPECT_EQ(r.dequantized[c], 0.0f);
}

TEST(WeightQuantizeTest, NonFiniteWeightsAreRefused) {
  std::vector<float> w(32, 0.0f);
  w[5] = std::numeric_limits<float>::infinity();
  WeightQuant q = Quant(WeightFormat::kInt8, 32, ScaleDType::kF16);
  std::vector<uint8_t> values(32), scales(2);
  absl::Status s = QuantizeWeights(w.data(), 1, 32, q, values.data(), scales.data());
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
}

// fp8-block: E4M3 codes rounded to nearest even under fp32 scales amax / 448
// per 2-D block (edge blocks short), the codes and scales those of
// models::QuantizeFp8Block; each element within half an E4M3 step (2^-4
// relative) of the weight.
TEST(WeightQuantizeTest, Fp8BlockRoundsToNearestEvenWithRaggedBlocks) {
  const int64_t rows = 150, cols = 200;  // blocks 128 x 128: a 2 x 2 grid, the edges short
  std::vector<float> w = RandomWeights(rows * cols, 4);
  w[7] = 0.5f;  // the largest of block (0, 0): its code is exactly 448
  WeightQuant q = Fp8BlockQuant(nullptr, 128, 128);
  Quantized r = RoundTrip(w, rows, cols, q);
  ASSERT_EQ(r.values.size(), size_t(rows * cols));
  ASSERT_EQ(r.scales.size(), 2u * 2u * sizeof(float));
  std::vector<uint8_t> codes(rows * cols);
  std::vector<float> scales(4);
  models::QuantizeFp8Block({rows, cols, 128, 128}, w.data(), codes.data(), scales.data());
  EXPECT_EQ(std::memcmp(codes.data(), r.values.data(), codes.size()), 0);
  EXPECT_EQ(std::memcmp(scales.data(), r.scales.data(), r.scales.size()), 0);
  EXPECT_EQ(scales[0], 0.5f / 448);
  EXPECT_EQ(r.values[7], 0x7e);  // +448
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float scale = scales[(i / cols / 128) * 2 + (i % cols) / 128];
    // Half a step: 2^-4 of |w| when normal, 2^-10 x scale when subnormal.
    EXPECT_LE(std::fabs(r.dequantized[i] - w[i]), std::fabs(w[i]) / 16 + scale / 1024) << i;
  }
  // A tie between two E4M3 values rounds to the even code: 1 + 1/16 lies
  // halfway between 1 (0x38) and 1.125 (0x39).
  std::vector<float> tie = {448.0f, 1.0625f, 1.1875f, -1.0625f};
  Quantized t = RoundTrip(tie, 1, 4, Fp8BlockQuant(nullptr, 128, 128));
  EXPECT_EQ(reinterpret_cast<const float*>(t.scales.data())[0], 1.0f);
  EXPECT_EQ(t.values[1], 0x38);  // 1.0, even
  EXPECT_EQ(t.values[2], 0x3a);  // 1.25, even (not 1.125)
  EXPECT_EQ(t.values[3], 0xb8);
}

TEST(WeightQuantizeTest, Fp8BlockRefusesNonFiniteWeightsAndNonF32Scales) {
  std::vector<float> w(32, 0.0f);
  std::vector<uint8_t> values(32);
  std::vector<float> scales(1);
  w[3] = std::numeric_limits<float>::quiet_NaN();
  WeightQuant q = Fp8BlockQuant(nullptr, 128, 128);
  EXPECT_TRUE(absl::IsInvalidArgument(QuantizeWeights(w.data(), 1, 32, q, values.data(),
                                                      scales.data())));
  w[3] = 0;
  q.scale_dtype = ScaleDType::kF16;
  EXPECT_TRUE(absl::IsInvalidArgument(QuantizeWeights(w.data(), 1, 32, q, values.data(),
                                                      scales.data())));
}

}  // namespace
}  // namespace expertd::engine
