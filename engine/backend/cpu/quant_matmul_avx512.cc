// The generic AVX-512 variant of the quantized matmul (quant_matmul.h): 16
// lanes, any group size that is a multiple of 16; QuantMatmulAvx512 runs the
// blocked kernel (quant_matmul_avx512_blocked.cc) where it applies, this
// elsewhere.
// The build's baseline is AVX2, so everything below the pragma is compiled
// for AVX-512 F/BW/VL/DQ and only ever called after cpuid says the CPU has it
// (QuantMatmulIsa). Headers are included before the pragma so their inline
// functions stay baseline code.
#include <immintrin.h>

#include <cstring>

#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/simd.h"
#include "engine/backend/weight_format.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

#include "engine/backend/cpu/quant_matmul_tile.h"

namespace expertd::engine::cpu {
namespace {

struct Avx512Traits {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V LoadX(const float* x) { return _mm512_loadu_ps(x); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Set1(float s) { return _mm512_set1_ps(s); }
  // Fixed order: the two 8-lane halves added, then simd.h's 8-lane tree.
  static float Sum(V v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    return HorizontalSum(_mm256_add_ps(lo, hi));
  }

  // 16 nibbles (8 bytes), element i in bits [4i, 4i + 4) of the 64-bit word:
  // dword i / 8 into lane i, then the nibble to the top of the lane.
  static __m512i NibblesAtTop(const uint8_t* p) {
    const __m512i words =
        _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m512i pick = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i shifts =
        _mm512_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    return _mm512_sllv_epi32(_mm512_permutexvar_epi32(pick, words), shifts);
  }
  template <WeightFormat F>
  static V LoadW(const uint8_t* row, int64_t col) {
    if constexpr (F == WeightFormat::kInt8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + col));
      return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    } else if constexpr (F == WeightFormat::kInt4) {
      return _mm512_cvtepi32_ps(_mm512_srai_epi32(NibblesAtTop(row + col / 2), 28));
    } else {
      const __m512 lut = _mm512_loadu_ps(kE2m1Values);  // all 16 codes, signs included
      return _mm512_permutexvar_ps(_mm512_srli_epi32(NibblesAtTop(row + col / 2), 28), lut);
    }
  }
};

}  // namespace

void QuantMatmulAvx512Generic(const MatmulParams& p, int64_t c0, int64_t c1) {
  QuantColumnsAnyFormat<Avx512Traits>(p, c0, c1);
}

void QuantMatmulAvx512(const MatmulParams& p, int64_t c0, int64_t c1) {
  if (!QuantMatmulAvx512Blocked(p, c0, c1)) QuantMatmulAvx512Generic(p, c0, c1);
}

}  // namespace expertd::engine::cpu

#pragma GCC pop_options
