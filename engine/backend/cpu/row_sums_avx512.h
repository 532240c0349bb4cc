// Reductions of a tile's 16-lane accumulators for the bf16 sequences
// (matmul_dense.h): each element's accumulator ends as lanes j + (j + 8)
// (j < 8) reduced by simd.h's HorizontalSum. Done eight elements at a time
// with transposing adds, bitwise the per-element reduction. AVX-512 only:
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

}  // namespace expertd::engine::cpu

#undef ATTR

#endif  // EXPERTD_ENGINE_BACKEND_CPU_ROW_SUMS_AVX512_H_
