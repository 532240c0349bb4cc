// DType, the element types of model tensors, and the scalar and bulk
// conversions between float32 and the 16-bit float formats a checkpoint may
// hold (bfloat16, IEEE float16, and FP8 E4M3 as DeepSeek-V3 publishes it).
// Float32 -> 16-bit rounds to nearest, ties to even (what PyTorch's
// .to(torch.bfloat16) does); NaN stays NaN (quiet), +-Inf stays Inf, overflow
// becomes Inf. 16-bit -> float32 is exact. FP8 E4M3 ("float8_e4m3fn": 4
// exponent bits, bias 7, 3 mantissa bits, no Inf, NaN = S.1111.111, max 448)
// -> float32 is exact; float32 -> E4M3 rounds to nearest even and saturates
// to +-448 (what quantizers do before the cast, since the format has no Inf).
// All functions are pure and thread-safe.
#ifndef EXPERTD_MODELS_DTYPE_DTYPE_H_
#define EXPERTD_MODELS_DTYPE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace expertd::models {

// kF8E4M3 tensors are block-scaled in checkpoints (a `*_scale_inv` tensor
// beside each weight); the dtype alone is the raw code, not the value.
// kU8 holds gpt-oss' MXFP4 experts only: the Checkpoint presents each expert
// matrix as uint8 e2m1 codes [rows, cols / 2] plus uint8 e8m0 scales
// (tensor_names.h, Mxfp4ScalesName); no other uint8 tensor gets past
// Checkpoint::Open, and the engine never computes on a kU8 tensor as such.
enum class DType { kF32, kF16, kBF16, kF8E4M3, kU8 };
// "float32", "float16", "bfloat16", "float8_e4m3fn", "uint8"
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// bfloat16 is the top 16 bits of a float32.
inline float Bf16ToF32(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

inline uint16_t F32ToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu +
       ((u >> 16) & 1u);  // round to nearest even; carries into the exponent (-> Inf) correctly
  return static_cast<uint16_t>(u >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// FP8 E4M3 (fn variant): exact decode; NaN codes (0x7f, 0xff) give a quiet NaN.
float E4m3ToF32(uint8_t code);
// Round to nearest even; |f| > 448 saturates to +-448 (code 0x7e / 0xfe);
// NaN -> 0x7f (sign kept); +-0 keeps its sign.
uint8_t F32ToE4m3(float f);
// The largest finite E4M3 magnitude.
inline constexpr float kE4m3Max = 448.0f;

// Converts n elements of `src` (in dtype `from`) to float32 in `dst`.
// `src` need not be aligned.
void ConvertToF32(DType from, const void* src, float* dst, size_t n);
// Converts n float32 values to dtype `to` (rounding as above) into `dst`
// (n * DTypeSize(to) bytes; need not be aligned).
void ConvertFromF32(DType to, const float* src, void* dst, size_t n);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_DTYPE_DTYPE_H_
