// AVX2/FMA helpers shared by the CPU kernels (AVX2 is the baseline ISA).
//
// Every reduction here has a FIXED order that depends only on the vector
// length, never on batch size or threads: this is what makes the CPU backend
// batch-invariant. Kernels are compiled with -ffp-contract=off, so scalar
// code never silently becomes FMA in one place and mul+add in another.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_SIMD_H_
#define EXPERTD_ENGINE_BACKEND_CPU_SIMD_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "engine/backend/op_params.h"

namespace expertd::engine::cpu {

// bf16 / fp16 / fp32 scalar to fp32 (exact).
using models::Bf16ToF32;
inline float F16ToF32(uint16_t v) { return _cvtsh_ss(v); }

inline float LoadScalar(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16:
      return F16ToF32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3:  // the raw code's value: block scales are the caller's
      return models::E4m3ToF32(static_cast<const uint8_t*>(data)[i]);
    case DType::kU8:  // a file dtype only (dtype.h)
      return static_cast<float>(static_cast<const uint8_t*>(data)[i]);
  }
  return 0.0f;
}

// Eight consecutive elements starting at element i, as fp32.
inline __m256 LoadF32x8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 LoadBf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 LoadF16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The first n (< 8) elements at p, zero-padded to 8 lanes.
inline __m256 LoadTailF32(const float* p, int64_t n) {
  alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) buf[i] = p[i];
  return _mm256_load_ps(buf);
}
inline __m256 LoadTail(const void* data, DType dtype, int64_t i, int64_t n) {
  alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t j = 0; j < n; ++j) buf[j] = LoadScalar(data, dtype, i + j);
  return _mm256_load_ps(buf);
}

// Sum of the 8 lanes in a fixed tree order: ((0+4)+(2+6)) + ((1+5)+(3+7)).
inline float HorizontalSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehl_ps(lo, lo);
  lo = _mm_add_ps(lo, sh);
  sh = _mm_shuffle_ps(lo, lo, 0x55);
  lo = _mm_add_ss(lo, sh);
  return _mm_cvtss_f32(lo);
}

// Dot product of two fp32 vectors: 8-lane FMA accumulation in k order, the
// zero-padded tail last, then HorizontalSum. The dense matmul uses exactly
// this sequence per (row, column) for fp32 and fp16 weights (bf16 weights
// have their own sequence: matmul_dense.h).
inline float DotF32(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(LoadF32x8(a + i), LoadF32x8(b + i), acc);
  if (i < n) acc = _mm256_fmadd_ps(LoadTailF32(a + i, n - i), LoadTailF32(b + i, n - i), acc);
  return HorizontalSum(acc);
}

// The bf16 dense sequence (matmul_dense.h) works on blocks of 32 k elements
// split into even and odd ones. PermuteBf16X writes x[0, k) as ceil(k / 32)
// blocks of 32 floats: x[32b + 2j] for j < 16, then x[32b + 2j + 1] for
// j < 16, zeros past k.
inline constexpr int64_t kBf16Block = 32;
inline void PermuteBf16Block(const float* s, float* d) {
  for (int h = 0; h < 2; ++h) {
    const __m256 a = _mm256_loadu_ps(s + 16 * h), b = _mm256_loadu_ps(s + 16 * h + 8);
    // Per 128-bit lane: a0 a2 b0 b2 | a4 a6 b4 b6 (and the odd ones), then
    // the 64-bit quarters reordered 0 2 1 3: a0 a2 a4 a6 b0 b2 b4 b6.
    const __m256 ev = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 od = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(d + 8 * h, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                    _mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(d + 16 + 8 * h, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                         _mm256_castps_pd(od), _MM_SHUFFLE(3, 1, 2, 0))));
  }
}
inline void PermuteBf16X(const float* x, int64_t k, float* out) {
  int64_t kk = 0;
  for (; kk + kBf16Block <= k; kk += kBf16Block) PermuteBf16Block(x + kk, out + kk);
  if (kk < k) {
    float buf[kBf16Block] = {};
    std::memcpy(buf, x + kk, (k - kk) * sizeof(float));
    PermuteBf16Block(buf, out + kk);
  }
}

// y[i] += a * x[i] for i < n (FMA per element, same for every i position).
inline void AxpyF32(float a, const float* x, float* y, int64_t n) {
  __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) {
    __m128 r = _mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(x[i]), _mm_set_ss(y[i]));
    y[i] = _mm_cvtss_f32(r);
  }
}

}  // namespace expertd::engine::cpu

#endif  // EXPERTD_ENGINE_BACKEND_CPU_SIMD_H_
