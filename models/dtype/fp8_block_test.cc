#include "models/dtype/fp8_block.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "models/dtype/dtype.h"

namespace expertd::models {
namespace {

// Partial edge blocks in both directions: 5 x 7 weight, 2 x 3 blocks.
TEST(Fp8BlockTest, QuantizeThenDequantizeKeepsEachBlockWithinHalfAStep) {
  const Fp8BlockShape s{5, 7, 2, 3};
  ASSERT_EQ(s.scale_rows(), 3);
  ASSERT_EQ(s.scale_cols(), 3);
  std::vector<float> w(35);
  for (int i = 0; i < 35; ++i) w[i] = std::sin(1.0f + i) * (i % 7 == 6 ? 100.0f : 1.0f);
  w[0] = w[1] = w[2] = w[7] = w[8] = w[9] = 0.0f;  // block (0, 0) all zero: scale 1
  std::vector<uint8_t> codes(35);
  std::vector<float> scale(9), back(35);
  QuantizeFp8Block(s, w.data(), codes.data(), scale.data());
  EXPECT_EQ(scale[0], 1.0f);
  DequantizeFp8Block(s, codes.data(), scale.data(), back.data());
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j) {
      const float sc = scale[(i / 2) * 3 + j / 3];
      const float x = w[i * 7 + j];
      // E4M3 keeps 3 mantissa bits: relative error <= 2^-4, or an absolute
      // 2^-10 * scale in the subnormal range.
      EXPECT_LE(std::fabs(back[i * 7 + j] - x), std::fabs(x) / 16 + sc / 1024) << i << "," << j;
      EXPECT_EQ(back[i * 7 + j], E4m3ToF32(codes[i * 7 + j]) * sc);
    }
  }
  // Each block's largest magnitude maps to exactly +-448.
  EXPECT_EQ(E4m3ToF32(codes[13] & 0x7f), kE4m3Max);  // the larger x100 value of block (0, 2)
}

}  // namespace
}  // namespace expertd::models
