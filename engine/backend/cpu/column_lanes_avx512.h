// Moving 16 columns' data between "one column per vector" and "one column
// per lane" for the int8-activation kernel (quant_matmul_avx512vnni.cc),
// whose lanes are output columns. AVX-512 only: callers are compiled for it
// and run after a CPU feature check.
#ifndef EXPERTD_ENGINE_BACKEND_CPU_COLUMN_LANES_AVX512_H_
#define EXPERTD_ENGINE_BACKEND_CPU_COLUMN_LANES_AVX512_H_

#include <immintrin.h>

#include <cstdint>

#define ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c")))

namespace expertd::engine::cpu {

// A 4 x 4 transpose of 128-bit quarters: quarter j of out[k] = quarter k
// of in[j] (two rounds of vshufi32x4).
ATTR __attribute__((always_inline)) inline void TransposeQuarters(const __m512i in[4],
                                                                  __m512i out[4]) {
  const __m512i t0 = _mm512_shuffle_i32x4(in[0], in[1], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i t1 = _mm512_shuffle_i32x4(in[0], in[1], _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i t2 = _mm512_shuffle_i32x4(in[2], in[3], _MM_SHUFFLE(1, 0, 1, 0));
  const __m512i t3 = _mm512_shuffle_i32x4(in[2], in[3], _MM_SHUFFLE(3, 2, 3, 2));
  out[0] = _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(2, 0, 2, 0));
  out[1] = _mm512_shuffle_i32x4(t0, t2, _MM_SHUFFLE(3, 1, 3, 1));
  out[2] = _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(2, 0, 2, 0));
  out[3] = _mm512_shuffle_i32x4(t1, t3, _MM_SHUFFLE(3, 1, 3, 1));
}

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
  TransposeQuarters(a, out);
}

// Sixteen columns' vectors of 16 partial sums to r[j], whose 128-bit
// quarter k holds the sums of quarter k's 4 lanes for columns 4j..4j+3
// (integer adds, exact in any order: pairs within quarters).
ATTR __attribute__((always_inline)) inline void SumQuarters(const __m512i p[16], __m512i r[4]) {
  __m512i q[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    q[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * i], p[2 * i + 1]),
                            _mm512_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(q[2 * j], q[2 * j + 1]),
                            _mm512_unpackhi_epi64(q[2 * j], q[2 * j + 1]));
  }
}

// Sixteen columns' vectors of 16 partial sums (lanes 0-7 of one 32-block,
// 8-15 of the next) reduced to the two blocks' sums, lane c = column c.
ATTR __attribute__((always_inline)) inline void ReduceSixteen(const __m512i p[16], __m512i* first,
                                                              __m512i* second) {
  __m512i r[4];
  SumQuarters(p, r);
  // Quarters 0 + 1 are the first block, 2 + 3 the second.
  const __m512i s01 = _mm512_add_epi32(_mm512_shuffle_i32x4(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i s23 = _mm512_add_epi32(_mm512_shuffle_i32x4(r[2], r[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(r[2], r[3], _MM_SHUFFLE(3, 1, 3, 1)));
  *first = _mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0));
  *second = _mm512_shuffle_i32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1));
}

// Sixteen columns' vectors of 16 partial sums, quarter k (4 lanes) of
// 32-block k, reduced to the four blocks' sums: out[k] lane c = column c.
ATTR __attribute__((always_inline)) inline void ReduceSixteenByQuarter(const __m512i p[16],
                                                                       __m512i out[4]) {
  __m512i r[4];
  SumQuarters(p, r);
  TransposeQuarters(r, out);
}

// fp16 scales, groups [g, g + 8) (16 bytes) of 16 columns: the pieces
// transposed as they are stored, each dword (two groups) split into its
// halves, widened to fp32 (exactly) in the lanes: s + 16 j lane l = group
// g + j of column l. Converting each column first and transposing the fp32
// copies took a quarter of the one-row int4 kernel's time (perf, weights in
// cache).
ATTR inline void TransposeF16ScalesOf8(const uint8_t* const scale_col[16], int64_t g, float* s) {
  __m512i v[4];
  TransposeColumns(scale_col, 2 * g, v);  // v[j] lane l: groups g + 2j, g + 2j + 1
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i even = _mm512_cvtepi32_epi16(v[j]);
    const __m256i odd = _mm512_cvtepi32_epi16(_mm512_srli_epi32(v[j], 16));
    _mm512_store_ps(s + 2 * j * 16, _mm512_cvtph_ps(even));
    _mm512_store_ps(s + (2 * j + 1) * 16, _mm512_cvtph_ps(odd));
  }
}

// All `groups` (a multiple of 8) the same way: s + 16 g lane l = group g.
ATTR inline void TransposeF16Scales(const uint8_t* const scale_col[16], int64_t groups, float* s) {
  for (int64_t g = 0; g < groups; g += 8) TransposeF16ScalesOf8(scale_col, g, s + g * 16);
}

// E8M0 scales (mxfp4), groups [g, g + 16) (16 bytes) of 16 columns, the
// same way: byte t of dword j is group g + 4j + t; 2^(e - 127) built in the
// lanes as ScalesToF32 does, times `factor`.
ATTR inline void TransposeE8m0ScalesOf16(const uint8_t* const scale_col[16], int64_t g,
                                         __m512 factor, float* s) {
  const __m512i byte = _mm512_set1_epi32(0xFF), zero = _mm512_setzero_si512();
  __m512i v[4];
  TransposeColumns(scale_col, g, v);  // v[j] lane l: groups g + 4j .. g + 4j + 3
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      const __m512i e = _mm512_and_si512(_mm512_srli_epi32(v[j], 8 * t), byte);
      __m512i bits = _mm512_slli_epi32(e, 23);
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, zero),
                                   _mm512_set1_epi32(0x00400000));  // 2^-127, subnormal
      bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(e, byte),
                                   _mm512_set1_epi32(0x7fc00000));  // NaN
      _mm512_store_ps(s + (4 * j + t) * 16, _mm512_mul_ps(_mm512_castsi512_ps(bits), factor));
    }
  }
}

// All `groups` (a multiple of 16) the same way.
ATTR inline void TransposeE8m0Scales(const uint8_t* const scale_col[16], int64_t groups,
                                     __m512 factor, float* s) {
  for (int64_t g = 0; g < groups; g += 16)
    TransposeE8m0ScalesOf16(scale_col, g, factor, s + g * 16);
}

}  // namespace expertd::engine::cpu

#undef ATTR

#endif  // EXPERTD_ENGINE_BACKEND_CPU_COLUMN_LANES_AVX512_H_
