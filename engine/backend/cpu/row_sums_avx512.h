// Reductions of a tile's 16-lane accumulators for the bf16 sequences
// (matmul_dense.h) and their stores: each element's accumulator ends as
// lanes j + (j + 8) (j < 8) reduced by simd.h's HorizontalSum, eight elements
// at a time with transposing adds (bitwise the per-element reduction), then
// + bias, (+ y). AVX-512 only:
// callers are compiled for it and run after a CPU feature check.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_ROW_SUMS_AVX512_H_
#define EXPERTD_ENGINE_BACKEND_CPU_ROW_SUMS_AVX512_H_

#include <immintrin.h>

#include <cstdint>

#include "engine/backend/cpu/simd.h"
#include "engine/backend/op_params.h"

#define ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

namespace expertd::engine::cpu {

// Eight 16-lane accumulators reduced at once, a[c]'s sum in lane c: the
// transposing adds pair lanes at distances 8, 4, 2 and 1 of every
// accumulator, the per-element tree exactly (lanes j + (j + 8), then
// HorizontalSum's (0 + 4, 2 + 6), (1 + 5, 3 + 7), then the two halves), so
// the bits are those of eight separate reductions; 25 instructions for eight sums
// instead of about 80 (bf16 [1024, 2048] x 512 rows, 2 threads: 400-407
// -> 443-449 GFLOP/s in the bf16-activation kernel).
ATTR inline __m256 ReduceEight(const __m512 a[8]) {
  __m512 s[4];  // s[i]: lanes 0-7 a[2i]'s j + (j + 8) sums, lanes 8-15 a[2i + 1]'s
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512 lo = _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    s[i] = _mm512_add_ps(lo, hi);
  }
  __m512 t[2];  // t[i]: 128-bit quarter q holds output 4i + q's l + (l + 4) sums (l < 4)
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m512 lo = _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1));
    t[i] = _mm512_add_ps(lo, hi);
  }
  // Quarter q: (u0, u1) of output q, then of output q + 4 (u0 = t0 + t2, u1 = t1 + t3).
  const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter q: output q, output q + 4 (twice).
  const __m512 o = _mm512_add_ps(_mm512_shuffle_ps(u, u, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(u, u, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, o));
}

// The first n (<= 8) sums in v, of row r, columns [c, c + n): + bias,
// (+ y), as StoreOne does for each.
ATTR inline void StoreRowSums(const MatmulParams& p, int64_t r, int64_t c, int n, __m256 v) {
  const __mmask8 mask = static_cast<__mmask8>((1u << n) - 1);
  if (!p.bias.empty()) {
    alignas(32) float b[8] = {};
    for (int i = 0; i < n; ++i) b[i] = LoadScalar(p.bias.data, p.bias.dtype, c + i);
    v = _mm256_add_ps(v, _mm256_load_ps(b));
  }
  float* y = p.y + r * p.y_stride + c;
  if (p.accumulate) v = _mm256_add_ps(_mm256_maskz_loadu_ps(mask, y), v);
  _mm256_mask_storeu_ps(y, mask, v);
}

// + bias, (+ y) for one element, as matmul.cc's Store does.
ATTR inline void StoreOneSum(const MatmulParams& p, int64_t r, int64_t c, float v) {
  if (!p.bias.empty()) v = v + LoadScalar(p.bias.data, p.bias.dtype, c);
  float* y = p.y + r * p.y_stride + c;
  *y = p.accumulate ? *y + v : v;
}

// One accumulator's reduction: lanes j + (j + 8), then HorizontalSum.
ATTR inline float FinishSum(__m512 acc) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return HorizontalSum(_mm256_add_ps(_mm512_castps512_ps256(acc), hi));
}

// A tile's R x C accumulators (rows r0.., columns c0..) reduced and stored:
// each row's sums together when C >= 4, one at a time otherwise. Always
// inlined: the accumulators must stay in registers in the caller's loop
// (passed to an out-of-line call, GCC keeps them in memory: 5% slower).
template <int R, int C>
ATTR __attribute__((always_inline)) inline void StoreTileSums(const MatmulParams& p, int64_t r0,
                                                              int64_t c0,
                                                              const __m512 (&acc)[R][C]) {
  if constexpr (C >= 4) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m512 sums[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) sums[c] = c < C ? acc[r][c] : _mm512_setzero_ps();
      StoreRowSums(p, r0 + r, c0, C, ReduceEight(sums));
    }
  } else {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) StoreOneSum(p, r0 + r, c0 + c, FinishSum(acc[r][c]));
    }
  }
}

}  // namespace expertd::engine::cpu

#undef ATTR

#endif  // EXPERTD_ENGINE_BACKEND_CPU_ROW_SUMS_AVX512_H_
