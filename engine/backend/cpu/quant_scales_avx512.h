// Block scales to fp32, 16 at a time, for the AVX-512 quantized kernels
// (their callers are compiled for AVX-512 and run after a CPU feature check).
#ifndef EXPERTD_ENGINE_BACKEND_CPU_QUANT_SCALES_AVX512_H_
#define EXPERTD_ENGINE_BACKEND_CPU_QUANT_SCALES_AVX512_H_

#include <immintrin.h>

#include <cstdint>

#include "engine/backend/weight_format.h"

#define ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace expertd::engine::cpu {

// Scales [s0, s0 + count) of `q` as fp32 into out (exact, as LoadScaleF32).
ATTR inline void ScalesToF32(const WeightQuant& q, int64_t s0, int64_t count, float* out) {
  int64_t i = 0;
  if (q.scale_dtype == ScaleDType::kF16) {
    const auto* s = static_cast<const uint16_t*>(q.scales) + s0;
    for (; i + 16 <= count; i += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
      _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
    }
  } else if (q.scale_dtype == ScaleDType::kE8M0) {
    const auto* s = static_cast<const uint8_t*>(q.scales) + s0;
    for (; i + 16 <= count; i += 16) {
      const __m512i e =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
      __m512i bits = _mm512_slli_epi32(e, 23);  // 2^(e - 127)
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                                   _mm512_set1_epi32(0x00400000));  // 2^-127, subnormal
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(255)),
                                   _mm512_set1_epi32(0x7fc00000));  // NaN
      _mm512_storeu_ps(out + i, _mm512_castsi512_ps(bits));
    }
  }
  for (; i < count; ++i) out[i] = LoadScaleF32(q.scales, q.scale_dtype, s0 + i);
}

}  // namespace expertd::engine::cpu

#undef ATTR

#endif  // EXPERTD_ENGINE_BACKEND_CPU_QUANT_SCALES_AVX512_H_
