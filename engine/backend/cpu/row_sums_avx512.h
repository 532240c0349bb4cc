// Reductions of a tile's 16-lane accumulators and their stores, many
// elements at a time with transposing adds, bitwise the per-element
// reduction, then + bias, (+ y):
// - the bf16 sequences (matmul_dense.h): one element per accumulator, lanes
//   j + (j + 8) (j < 8), then simd.h's HorizontalSum;
// - the fp32 sequence (DotF32): two elements per accumulator, each 8 lanes
//   reduced by HorizontalSum.
// AVX-512 only: callers are compiled for it and run after a CPU feature check.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_ROW_SUMS_AVX512_H_
#define EXPERTD_ENGINE_BACKEND_CPU_ROW_SUMS_AVX512_H_

#include <immintrin.h>

#include <cstdint>

#include "engine/backend/cpu/matmul_rows.h"
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

// The first n (<= 16) sums in v, of row r, columns [c, c + n): + bias,
// (* row weight), (+ y): matmul_rows.h's StoreElement, 16 at a time.
ATTR inline void StoreRowSums16(const MatmulParams& p, int64_t r, int64_t c, int n, __m512 v) {
  const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
  if (!p.bias.empty()) {
    alignas(64) float b[16] = {};
    for (int i = 0; i < n; ++i) b[i] = LoadScalar(p.bias.data, p.bias.dtype, c + i);
    v = _mm512_add_ps(v, _mm512_load_ps(b));
  }
  if (p.row_weights != nullptr) v = _mm512_mul_ps(_mm512_set1_ps(RowWeight(p, r)), v);
  float* y = YRow(p, r) + c;
  if (p.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
  _mm512_mask_storeu_ps(y, mask, v);
}

// The same for the first n (<= 8) sums in an 8-lane v.
ATTR inline void StoreRowSums(const MatmulParams& p, int64_t r, int64_t c, int n, __m256 v) {
  StoreRowSums16(p, r, c, n, _mm512_zextps256_ps512(v));
}

// One element, as matmul_avx2.cc's Store finishes it.
ATTR inline void StoreOneSum(const MatmulParams& p, int64_t r, int64_t c, float v) {
  StoreElement(p, r, c, v);
}

// One accumulator's reduction: lanes j + (j + 8), then HorizontalSum.
ATTR inline float FinishSum(__m512 acc) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return HorizontalSum(_mm256_add_ps(_mm512_castps512_ps256(acc), hi));
}

// Six two-element accumulators (a[i]: element 2i in lanes 0-7, 2i + 1 in
// lanes 8-15) reduced at once, element j's sum in lane j (j < 12). Each
// element's 8 lanes take HorizontalSum's tree, ((v0 + v4) + (v2 + v6)) +
// ((v1 + v5) + (v3 + v7)), with the same operand order: 19 instructions for
// twelve sums instead of about 100, which at k ~ 100 (a MoEShard device's
// slice of an expert's down projection) cost as much as the k loop itself.
ATTR inline __m512 ReduceTwelvePairs(const __m512 a[6]) {
  // s[i]: quarter q holds element 4i + q's v_l + v_{l + 4} sums (l < 4).
  __m512 s[3];
#pragma GCC unroll 3
  for (int i = 0; i < 3; ++i) {
    s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Quarter q: (t0, t1) of element q, then of element q + 4 (t0 = s0 + s2,
  // t1 = s1 + s3); u: the same for elements q + 8 (and nothing).
  const __m512 zero = _mm512_setzero_ps();
  const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(s[2], zero, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(s[2], zero, _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter q, slot e: t0 + t1 of element 4e + q.
  const __m512 o = _mm512_add_ps(_mm512_shuffle_ps(t, u, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(t, u, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, o);
}

// A tile of R rows x C two-element accumulators (columns [c0, c0 + cols),
// cols <= 2C <= 12) reduced and stored row by row. Always inlined, as below.
template <int R, int C>
ATTR __attribute__((always_inline)) inline void StorePairTileSums(const MatmulParams& p,
                                                                  int64_t r0, int64_t c0,
                                                                  int64_t cols,
                                                                  const __m512 (&acc)[R][C]) {
  static_assert(C >= 1 && C <= 6, "a tile row holds at most 12 elements");
  if (cols <= 0) return;
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m512 pairs[6];
#pragma GCC unroll 6
    for (int c = 0; c < 6; ++c) pairs[c] = c < C ? acc[r][c] : _mm512_setzero_ps();
    StoreRowSums16(p, r0 + r, c0, static_cast<int>(cols), ReduceTwelvePairs(pairs));
  }
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
