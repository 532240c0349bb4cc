// Moving 16 columns' data between "one column per vector" and "one column
// per lane" for the int8-activation kernel (quant_matmul_avx512vnni.cc),
// whose lanes are output columns. AVX-512 only: callers are compiled for it
// and run after a CPU feature check.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_COLUMN_LANES_AVX512_H_
#define EXPERTD_ENGINE_BACKEND_CPU_COLUMN_LANES_AVX512_H_

#include <immintrin.h>

#include <cstdint>

#define ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

namespace expertd::engine::cpu {

// Dword j (j < 4) of 16 bytes at col[l] + offset, for the 16 columns l,
// into out[j] lane l: four columns' 16 bytes per vector, each vector's 4x4
// dwords transposed (vpermd), then its 128-bit quarters across the four
// vectors (two rounds of vshufi32x4). A gather per output measured ~8x
// slower on this CPU.
ATTR __attribute__((always_inline)) inline void TransposeColumns(const uint8_t* const col[16],
                                                                 int64_t offset, __m512i out[4]) {
  const __m512i by_dword = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512i a[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    auto load = [&](int l) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(col[4 * q + l] + offset));
    };
    __m512i v = _mm512_castsi128_si512(load(0));
    v = _mm512_inserti32x4(v, load(1), 1);
    v = _mm512_inserti32x4(v, load(2), 2);
    v = _mm512_inserti32x4(v, load(3), 3);
    a[q] = _mm512_permutexvar_epi32(by_dword, v);  // quarter j: dword j of columns 4q..4q+3
  }
  const __m512i t0 = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i t1 = _mm512_shuffle_i32x4(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i t2 = _mm512_shuffle_i32x4(a[2], a[3], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i t3 = _mm512_shuffle_i32x4(a[2], a[3], _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(2, 0, 2, 0));
  out[1] = _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(3, 1, 3, 1));
  out[2] = _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(2, 0, 2, 0));
  out[3] = _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(3, 1, 3, 1));
}

// Sixteen columns' vectors of 16 partial sums (lanes 0-7 of one 32-block,
// 8-15 of the next) reduced to the two blocks' sums, lane c = column c:
// integer adds, exact in any order (pairs within 128-bit quarters, then
// across them).
ATTR __attribute__((always_inline)) inline void ReduceSixteen(const __m512i p[16], __m512i* first,
                                                              __m512i* second) {
  __m512i q[8], r[4];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    q[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * i], p[2 * i + 1]),
                            _mm512_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  }
  // r[j] quarter k: the quarter-k sums of columns 4j..4j+3.
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(q[2 * j], q[2 * j + 1]),
                            _mm512_unpackhi_epi64(q[2 * j], q[2 * j + 1]));
  }
  // Quarters 0 + 1 are the first block, 2 + 3 the second.
  const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(r[2], r[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(r[2], r[3], _MM_SHUFFLE(3, 1, 3, 1)));
  *first = _mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0));
  *second = _mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1));
}

}  // namespace expertd::engine::cpu

#undef ATTR

#endif  // EXPERTD_ENGINE_BACKEND_CPU_COLUMN_LANES_AVX512_H_
