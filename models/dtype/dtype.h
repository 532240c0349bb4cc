// DType, the element types of model tensors, and the scalar and bulk
// conversions between float32 and the 16-bit float formats a checkpoint may
// hold (bfloat16, IEEE float16). Float32 -> 16-bit rounds
// to nearest, ties to even (what PyTorch's .to(torch.bfloat16) does); NaN stays
// NaN (quiet), +-Inf stays Inf, overflow becomes Inf. 16-bit -> float32 is
// exact. All functions are pure and thread-safe.
#ifndef EXPERTD_MODELS_DTYPE_DTYPE_H_
#define EXPERTD_MODELS_DTYPE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace expertd::models {

enum class DType { kF32, kF16, kBF16 };
const char* DTypeName(DType dtype);  // "float32", "float16", "bfloat16"
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

// Converts n elements of `src` (in dtype `from`) to float32 in `dst`.
// `src` need not be aligned.
void ConvertToF32(DType from, const void* src, float* dst, size_t n);
// Converts n float32 values to dtype `to` (rounding as above) into `dst`
// (n * DTypeSize(to) bytes; need not be aligned).
void ConvertFromF32(DType to, const float* src, void* dst, size_t n);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_DTYPE_DTYPE_H_
