// The AVX2 + FMA variant of the quantized matmul (quant_matmul.h): 8 lanes.
#include <immintrin.h>

#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/quant_matmul_tile.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu {
namespace {

struct Avx2Traits {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V LoadX(const float* x) { return _mm256_loadu_ps(x); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Set1(float s) { return _mm256_set1_ps(s); }
  static float Sum(V v) { return HorizontalSum(v); }

  // 8 nibbles (4 bytes), element i in bits [4i, 4i + 4): moved to the top of
  // lane i.
  static __m256i NibblesAtTop(const uint8_t* p) {
    int32_t word;
    std::memcpy(&word, p, 4);
    const __m256i shifts = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
    return _mm256_sllv_epi32(_mm256_set1_epi32(word), shifts);
  }
  template <WeightFormat F>
  static V LoadW(const uint8_t* row, int64_t col) {
    if constexpr (F == WeightFormat::kInt8) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + col));
      return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    } else if constexpr (F == WeightFormat::kInt4) {
      return _mm256_cvtepi32_ps(_mm256_srai_epi32(NibblesAtTop(row + col / 2), 28));
    } else {
      // e2m1: magnitude from a table (permutevar reads the low 3 bits), the
      // code's bit 3 is already the lane's sign bit.
      const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
      const __m256i top = NibblesAtTop(row + col / 2);
      const __m256 mag = _mm256_permutevar8x32_ps(lut, _mm256_srli_epi32(top, 28));
      const __m256i sign = _mm256_and_si256(top, _mm256_set1_epi32(INT32_MIN));
      return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
    }
  }
};

}  // namespace

void QuantMatmulAvx2(const MatmulParams& p, int64_t c0, int64_t c1) {
  QuantColumnsAnyFormat<Avx2Traits>(p, c0, c1);
}

}  // namespace expertd::engine::cpu
