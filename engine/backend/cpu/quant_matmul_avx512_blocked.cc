// The AVX-512 quantized matmul for the shapes decode runs (quant_matmul.h):
// group size 32, 64 or 128, k a whole number of 64-byte lines of codes. Per
// 16 weights it spends 3 vector instructions besides the FMA's x load:
//   int8          vpmovsxbd (from memory), vcvtdq2ps, vfmadd
//   int4, mxfp4   vpbroadcastq (a load), vpsrlvq, vpermps (a 16-entry table
//                 of the codes' values: the nibble needs no masking, vpermps
//                 reads the low 4 bits of each index), vfmadd
// and per group and column one FMA with the scale broadcast from memory: the
// tile's scales are converted to fp32 once (16 per instruction), not per
// group. The shifted broadcast puts nibble (l & 1) * 8 + l / 2 in lane l, so
// x is permuted the same way (one vpermps per 16 x values, shared by the
// tile's 8 columns): the lane sums pair the same x and w as the generic
// variant, in another lane order (a difference of fp32 rounding only).
// Prefetch: one per 64-byte line of each of the next tile's rows.
//
// Everything after the pragma is compiled for AVX-512 F/BW/VL/DQ and called
// only after cpuid says the CPU has it (QuantMatmulIsa).
#include <immintrin.h>

#include <cstdint>

#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/simd.h"
#include "engine/backend/weight_format.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace expertd::engine::cpu {
namespace {

constexpr int kTileColumns = 8;
constexpr int64_t kMaxGroups = 512;  // per row: the tile's fp32 scales live on the stack

inline float Sum16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return HorizontalSum(_mm256_add_ps(lo, hi));
}

// The values of the 16 four-bit codes, as fp32.
alignas(64) constexpr float kInt4Values[16] = {0, 1, 2, 3, 4, 5, 6, 7,
                                               -8, -7, -6, -5, -4, -3, -2, -1};

template <WeightFormat F>
constexpr int64_t kWeightsPerLine = F == WeightFormat::kInt8 ? 64 : 128;

// Scales [s0, s0 + count) of `q` as fp32 into out (exact, as LoadScaleF32).
void ScalesToF32(const WeightQuant& q, int64_t s0, int64_t count, float* out) {
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

// 16 decoded codes of a row starting at column col (a multiple of 16), in the
// lane order the file comment describes; `table` is the 4-bit formats' values.
template <WeightFormat F>
inline __m512 LoadCodes(const uint8_t* row, int64_t col, __m512 table) {
  if constexpr (F == WeightFormat::kInt8) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + col));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  } else {
    int64_t word;
    __builtin_memcpy(&word, row + col / 2, 8);
    const __m512i shifts = _mm512_setr_epi64(0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i idx = _mm512_srlv_epi64(_mm512_set1_epi64(word), shifts);
    return _mm512_permutexvar_ps(idx, table);
  }
}

// 16 x values starting at col, in the lane order of LoadCodes<F>.
template <WeightFormat F>
inline __m512 LoadX(const float* x, int64_t col) {
  const __m512 v = _mm512_loadu_ps(x + col);
  if constexpr (F == WeightFormat::kInt8) {
    return v;
  } else {
    const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    return _mm512_permutexvar_ps(order, v);
  }
}

// C columns from c0, every row: per column, per group, the group's lane sums
// scaled into the accumulator; the horizontal sum last.
template <WeightFormat F, int kG, int C>
void Tile(const MatmulParams& p, int64_t c0) {
  const WeightQuant& q = p.w.quant;
  const int64_t k = p.w.cols, groups = k / kG;
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  const auto* base = static_cast<const uint8_t*>(p.w.data);
  alignas(64) float scales[C][kMaxGroups];
  const uint8_t* w[C];
  for (int c = 0; c < C; ++c) {
    w[c] = base + (c0 + c) * row_bytes;
    ScalesToF32(q, ((c0 + c) / q.block_rows) * groups, groups, scales[c]);
  }
  const __m512 table = _mm512_load_ps(F == WeightFormat::kInt4 ? kInt4Values : kE2m1Values);
  // A chunk: whole groups and whole 64-byte lines.
  constexpr int64_t kChunk = kG > kWeightsPerLine<F> ? kG : kWeightsPerLine<F>;
  constexpr int64_t kLinesPerChunk = kChunk / kWeightsPerLine<F>;
  const uint8_t* next = base + (c0 + C) * row_bytes;
  const bool prefetch = c0 + 2 * C <= p.w.rows;
  for (int64_t r = 0; r < p.m; ++r) {
    const float* x = p.x + r * p.x_stride;
    __m512 acc[C];
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < k; i0 += kChunk) {
      if (prefetch && r == 0) {
        const uint64_t off = QuantValueBytes(F, 1, i0);
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          #pragma GCC unroll 16
          for (int64_t l = 0; l < kLinesPerChunk; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(next + c * row_bytes + off + 64 * l),
                         _MM_HINT_T0);
        }
      }
      #pragma GCC unroll 16
      for (int64_t g0 = i0; g0 < i0 + kChunk; g0 += kG) {
        __m512 part[C];
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c) part[c] = _mm512_setzero_ps();
        #pragma GCC unroll 16
        for (int64_t i = g0; i < g0 + kG; i += 16) {
          const __m512 xv = LoadX<F>(x, i);
          #pragma GCC unroll 16
          for (int c = 0; c < C; ++c)
            part[c] = _mm512_fmadd_ps(xv, LoadCodes<F>(w[c], i, table), part[c]);
        }
        const int64_t b = g0 / kG;
        #pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
          acc[c] = _mm512_fmadd_ps(part[c], _mm512_set1_ps(scales[c][b]), acc[c]);
      }
    }
    float* y = p.y + r * p.y_stride + c0;
    for (int c = 0; c < C; ++c) {
      float v = Sum16(acc[c]);
      if (!p.bias.empty()) v = v + LoadScalar(p.bias.data, p.bias.dtype, c0 + c);
      y[c] = p.accumulate ? y[c] + v : v;
    }
  }
}

template <WeightFormat F, int kG>
void Columns(const MatmulParams& p, int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + kTileColumns <= c1; c += kTileColumns) Tile<F, kG, kTileColumns>(p, c);
  for (; c < c1; ++c) Tile<F, kG, 1>(p, c);
}

template <WeightFormat F>
bool ColumnsForGroup(const MatmulParams& p, int64_t c0, int64_t c1) {
  switch (p.w.quant.group_size) {
    case 32:
      Columns<F, 32>(p, c0, c1);
      return true;
    case 64:
      Columns<F, 64>(p, c0, c1);
      return true;
    case 128:
      Columns<F, 128>(p, c0, c1);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool QuantMatmulAvx512Blocked(const MatmulParams& p, int64_t c0, int64_t c1) {
  const WeightQuant& q = p.w.quant;
  const int64_t k = p.w.cols;
  if (q.group_size <= 0 || k % q.group_size != 0 || k / q.group_size > kMaxGroups) return false;
  switch (q.format) {
    case WeightFormat::kInt8:
      return k % kWeightsPerLine<WeightFormat::kInt8> == 0 &&
             ColumnsForGroup<WeightFormat::kInt8>(p, c0, c1);
    case WeightFormat::kInt4:
      return k % kWeightsPerLine<WeightFormat::kInt4> == 0 &&
             ColumnsForGroup<WeightFormat::kInt4>(p, c0, c1);
    case WeightFormat::kMxfp4:
      return k % kWeightsPerLine<WeightFormat::kMxfp4> == 0 &&
             ColumnsForGroup<WeightFormat::kMxfp4>(p, c0, c1);
    default:
      return false;
  }
}

}  // namespace expertd::engine::cpu

#pragma GCC pop_options
