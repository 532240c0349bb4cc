// Block-scaled FP8 matmul, AVX-512 variant (16 lanes): compiled with
// -mavx512f -mavx512bw -mavx512vl and called only when the CPU has them
// (matmul_fp8.cc: BestFp8Isa). Same structure as the AVX2 variant.
//
// It deliberately does not include simd.h: an inline helper compiled here
// with AVX-512 enabled could be the copy the linker keeps for every caller,
// and would then fault on a CPU without AVX-512. Helpers here are local.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "engine/backend/cpu/matmul_fp8.h"
#include "models/dtype/dtype.h"

namespace expertd::engine::cpu::internal {
namespace {

// Sixteen E4M3 codes -> fl(E4M3 value * scale) (scale256 = the block scale
// * 256), NaN codes -> NaN. The sign-extended code shifted left by 7 is the
// IEEE half of value E4M3 / 256 once bit 14 (a copy of the sign) is cleared;
// the NaN codes (0x7f, 0xff) are found on the bytes and masked into the
// product: 8 instructions per 16 weights with the FMA, against 12 for
// widening, masking and shifting sign and magnitude apart.
inline __m512 E4m3x16Scaled(const uint8_t* codes, __m512 scale256) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __mmask16 finite = _mm_cmpneq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(-128)),
                                                _mm_set1_epi8(-1));
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7),
                                     _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
  return _mm512_mask_mul_ps(_mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()), finite,
                            _mm512_cvtph_ps(h), scale256);
}

// Fixed order: the two 8-lane halves added lane-wise, then the 8-lane tree
// ((0+4)+(2+6)) + ((1+5)+(3+7)).
inline float HorizontalSum16(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 v8 = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 0x55));
  return _mm_cvtss_f32(lo);
}

inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

inline float BiasAt(const WeightRef& bias, int64_t i) {
  float v;
  models::ConvertToF32(bias.dtype,
                       static_cast<const uint8_t*>(bias.data) + i * models::DTypeSize(bias.dtype),
                       &v, 1);
  return v;
}

template <int R, int C>
void Tile(const MatmulParams& p, int64_t r0, int64_t c0) {
  const int64_t k = p.w.cols;
  const Fp8BlockGrid fs = Fp8GridOf(p.w.quant, p.w.cols);
  const auto* codes = static_cast<const uint8_t*>(p.w.data);
  __m512 acc[R][C];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const float* srow[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    srow[c] = fs.scale + ((fs.row0 + c0 + c) / fs.block_rows) * fs.scale_cols;
  const int64_t k16 = k / 16 * 16;
  const uint8_t* next = codes + (c0 + C) * k;
  const bool prefetch = c0 + 2 * C <= p.w.rows;
  for (int64_t kb = 0; kb < k16; kb += fs.block_cols) {
    const int64_t kend = Min(k16, kb + fs.block_cols);
    __m512 s[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) s[c] = _mm512_set1_ps(srow[c][kb / fs.block_cols] * 256.0f);
    for (int64_t kk = kb; kk < kend; kk += 16) {
      if (prefetch && (kk & 63) == 0) {
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) _mm_prefetch(next + c * k + kk, _MM_HINT_T1);
      }
      __m512 xv[R];
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(p.x + (r0 + r) * p.x_stride + kk);
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m512 wv = E4m3x16Scaled(codes + (c0 + c) * k + kk, s[c]);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
      }
    }
  }
  if (k16 < k) {  // the zero-padded tail, dequantized one element at a time
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - k16)) - 1);
    for (int c = 0; c < C; ++c) {
      alignas(64) float buf[16] = {};
      for (int64_t j = k16; j < k; ++j) {
        buf[j - k16] = models::E4m3ToF32(codes[(c0 + c) * k + j]) * srow[c][j / fs.block_cols];
      }
      const __m512 wv = _mm512_load_ps(buf);
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_maskz_loadu_ps(mask, p.x + (r0 + r) * p.x_stride + k16);
        acc[r][c] = _mm512_fmadd_ps(xv, wv, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (r0 + r) * p.y_stride + c0;
    for (int c = 0; c < C; ++c) {
      float v = HorizontalSum16(acc[r][c]);
      if (!p.bias.empty()) v = v + BiasAt(p.bias, c0 + c);
      y[c] = p.accumulate ? y[c] + v : v;
    }
  }
}

template <int R, int C>
void RowBlock(const MatmulParams& p, int64_t r0, int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) Tile<R, C>(p, r0, c);
  for (; c < c1; ++c) Tile<R, 1>(p, r0, c);
}

}  // namespace

void MatmulFp8UnitAvx512(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) RowBlock<4, 2>(p, r, c0, c1);
  for (; r < r1; ++r) RowBlock<1, 8>(p, r, c0, c1);
}

}  // namespace expertd::engine::cpu::internal
