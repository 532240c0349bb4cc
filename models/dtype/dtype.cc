#include "models/dtype/dtype.h"

#include <algorithm>
#include <cmath>

namespace expertd::models {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF8E4M3:
      return "float8_e4m3fn";
    case DType::kU8:
      return "uint8";
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
    case DType::kU8:
      return 1;
  }
  return 0;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp != 0) return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return BitsToFloat(sign);  // +-0
  // Subnormal: value = mant * 2^-24, exactly representable in float32.
  float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u)
    return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x3ffu);  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf (and Inf itself)
  if (abs >= 0x38800000u) {                       // normal half (>= 2^-14)
    uint32_t r = abs - (112u << 23);              // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);               // round to nearest even at bit 13
    return sign | static_cast<uint16_t>(r >> 13);
  }
  if (abs < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 itself ties to 0)
  // Subnormal half: value / 2^-24 rounded to nearest even integer.
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 24-bit significand
  const uint32_t shift = 126 - exp;                     // in [14, 24]
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

float E4m3ToF32(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xfu;
  const uint32_t mant = code & 0x7u;
  if (exp == 0xf && mant == 0x7) return BitsToFloat(sign | 0x7fc00000u);  // NaN
  if (exp != 0) return BitsToFloat(sign | ((exp + 120) << 23) | (mant << 20));
  // Subnormal (or zero): mant * 2^-9, exact in float32.
  return BitsToFloat(sign | FloatBits(static_cast<float>(mant) * (1.0f / 512.0f)));
}

uint8_t F32ToE4m3(float f) {
  const uint32_t u = FloatBits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7fu;   // NaN
  if (abs >= 0x43e00000u) return sign | 0x7eu;  // >= 448 (and Inf): saturate
  if (abs >= 0x3c800000u) {                     // normal E4M3 (>= 2^-6)
    uint32_t r = abs - (120u << 23);            // rebias exponent 127 -> 7
    r += 0x7ffffu + ((r >> 20) & 1u);           // round to nearest even at bit 20
    const uint32_t code = r >> 20;              // may carry into the next binade
    return sign | static_cast<uint8_t>(code > 0x7eu ? 0x7eu : code);  // 464..480 -> 448
  }
  if (abs < 0x3a000000u) return sign;  // < 2^-11: below half the smallest subnormal
  // Subnormal E4M3: value / 2^-9 rounded to nearest even integer (0..8).
  const uint32_t exp = abs >> 23;
  const uint32_t m = (abs & 0x7fffffu) | 0x800000u;  // 24-bit significand
  const uint32_t shift = 141 - exp;                  // value = m * 2^(exp-150); / 2^-9
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint8_t>(q);  // q == 8 is 2^-6, the smallest normal: same code
}

void ConvertToF32(DType from, const void* src, float* dst, size_t n) {
  const auto* bytes = static_cast<const unsigned char*>(src);
  switch (from) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case DType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = E4m3ToF32(bytes[i]);
      return;
    case DType::kU8:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(bytes[i]);
      return;
  }
}

void ConvertFromF32(DType to, const float* src, void* dst, size_t n) {
  auto* bytes = static_cast<unsigned char*>(dst);
  switch (to) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = F32ToBf16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h = F32ToF16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    case DType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) bytes[i] = F32ToE4m3(src[i]);
      return;
    case DType::kU8:  // the nearest byte value
      for (size_t i = 0; i < n; ++i)
        bytes[i] = static_cast<unsigned char>(std::nearbyint(std::clamp(src[i], 0.0f, 255.0f)));
      return;
  }
}

}  // namespace expertd::models
