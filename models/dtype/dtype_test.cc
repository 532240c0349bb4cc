#include "models/dtype/dtype.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::models {
namespace {

// The F16C instructions (baseline flag -mf16c) are an exact oracle for IEEE half.
uint16_t HardwareF32ToF16(float f) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set1_ps(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
float HardwareF16ToF32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(h))));
}

bool IsNanBits16Half(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

TEST(DTypeTest, F16ToF32MatchesHardwareForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float ours = F16ToF32(static_cast<uint16_t>(h));
    float hw = HardwareF16ToF32(static_cast<uint16_t>(h));
    if (IsNanBits16Half(static_cast<uint16_t>(h))) {
      EXPECT_TRUE(std::isnan(ours)) << h;
    } else {
      EXPECT_EQ(FloatBits(ours), FloatBits(hw)) << "half bits " << h;
    }
  }
}

TEST(DTypeTest, F32ToF16MatchesHardwareOnManyFloats) {
  // A deterministic sweep of bit patterns covering every exponent, plus
  // exact halfway points between neighbouring halves.
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 2000000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    float f = BitsToFloat(static_cast<uint32_t>(x));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), HardwareF32ToF16(f)) << "float bits " << FloatBits(f);
  }
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    float lo = F16ToF32(static_cast<uint16_t>(h)), hi = F16ToF32(static_cast<uint16_t>(h + 1));
    float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    ASSERT_EQ(F32ToF16(mid), HardwareF32ToF16(mid)) << h;
    ASSERT_EQ(F32ToF16(-mid), HardwareF32ToF16(-mid)) << h;
  }
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // rounds up to Inf
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);
  EXPECT_TRUE(IsNanBits16Half(F32ToF16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(DTypeTest, BF16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = Bf16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(f))));
    } else {
      EXPECT_EQ(F32ToBf16(f), h);
    }
  }
}

TEST(DTypeTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBf16(BitsToFloat(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(F32ToBf16(BitsToFloat(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(F32ToBf16(BitsToFloat(0x3f808001u)), 0x3f81);  // above tie -> up
  EXPECT_EQ(F32ToBf16(BitsToFloat(0x3f807fffu)), 0x3f80);  // below tie -> down
  EXPECT_EQ(F32ToBf16(BitsToFloat(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to Inf
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  uint16_t nan = F32ToBf16(BitsToFloat(0x7f800001u));  // signalling NaN with low payload
  EXPECT_TRUE(std::isnan(Bf16ToF32(nan)));
}

// E4M3 by its definition (an independent formula, not the bit tricks):
// (-1)^s * 2^(e-7) * (1 + m/8) for e > 0, (-1)^s * 2^-6 * m/8 for e == 0.
double E4m3ByDefinition(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}
bool IsE4m3Nan(uint8_t c) { return (c & 0x7f) == 0x7f; }

TEST(DTypeTest, E4m3DecodeMatchesDefinitionForAll256Codes) {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = E4m3ToF32(static_cast<uint8_t>(c));
    if (IsE4m3Nan(static_cast<uint8_t>(c))) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    ++finite;
    EXPECT_EQ(static_cast<double>(v), E4m3ByDefinition(static_cast<uint8_t>(c))) << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << c;  // -0 included
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(E4m3ToF32(0x7e), kE4m3Max);
  EXPECT_EQ(E4m3ToF32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(E4m3ToF32(0x08), std::ldexp(1.0f, -6));  // smallest normal
}

TEST(DTypeTest, E4m3EncodeRoundTripsAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if (IsE4m3Nan(code)) {
      EXPECT_EQ(F32ToE4m3(E4m3ToF32(code)) & 0x7f, 0x7f) << c;
    } else {
      EXPECT_EQ(F32ToE4m3(E4m3ToF32(code)), code) << c;
    }
  }
}

// Brute force: the nearest of the 253 finite non-negative-zero codes, ties to
// the even code, saturating past 448.
uint8_t NearestE4m3(float f) {
  const double x = f;
  if (std::fabs(x) >= kE4m3Max) return (std::signbit(f) ? 0x80 : 0) | 0x7e;
  int best = -1;
  double best_err = 0;
  for (int c = 0; c < 0x7f; ++c) {  // non-negative codes; sign applied after
    const double err = std::fabs(std::fabs(x) - E4m3ByDefinition(static_cast<uint8_t>(c)));
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>((std::signbit(f) ? 0x80 : 0) | best);
}

TEST(DTypeTest, E4m3EncodeRoundsToNearestEvenAndSaturates) {
  std::vector<float> probes = {0.0f,
                               -0.0f,
                               1e-30f,
                               448.0f,
                               449.0f,
                               463.9f,
                               464.0f,
                               465.0f,
                               480.0f,
                               1e6f,
                               std::numeric_limits<float>::infinity()};
  // Every code's value, the midpoints to its neighbours, and points just
  // either side of each midpoint.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = static_cast<float>(E4m3ByDefinition(static_cast<uint8_t>(c)));
    const float hi = static_cast<float>(E4m3ByDefinition(static_cast<uint8_t>(c + 1)));
    const float mid = (lo + hi) / 2;  // exact in float32
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), hi}) {
      probes.push_back(v);
      probes.push_back(-v);
    }
  }
  for (uint32_t bits = 0; bits < 0x80000000u; bits += 0x00012345u)
    probes.push_back(BitsToFloat(bits));
  for (float f : probes) {
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToE4m3(f), NearestE4m3(f)) << f << " bits " << FloatBits(f);
  }
  EXPECT_EQ(F32ToE4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(F32ToE4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
}

TEST(DTypeTest, BulkConversionsAgreeWithScalar) {
  std::vector<float> src = {0.0f, -1.5f, 3.14159f, 1e-6f, -65504.0f, 1e30f};
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3}) {
    std::vector<uint8_t> bytes(src.size() * DTypeSize(dt) + 1);
    ConvertFromF32(dt, src.data(), bytes.data() + 1, src.size());  // deliberately unaligned
    std::vector<float> back(src.size());
    ConvertToF32(dt, bytes.data() + 1, back.data(), src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      float expect = dt == DType::kF32    ? src[i]
                     : dt == DType::kF16  ? F16ToF32(F32ToF16(src[i]))
                     : dt == DType::kBF16 ? Bf16ToF32(F32ToBf16(src[i]))
                                          : E4m3ToF32(F32ToE4m3(src[i]));
      EXPECT_EQ(FloatBits(back[i]), FloatBits(expect)) << DTypeName(dt) << " " << i;
    }
  }
}

}  // namespace
}  // namespace expertd::models
