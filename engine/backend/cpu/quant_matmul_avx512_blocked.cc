// The AVX-512 quantized matmul for the shapes experts have (quant_matmul.h):
// group size 32, 64 or 128, k a whole number of 64-byte lines of codes. Decode
// (fewer than 4 rows: Tile, ChunkTile) decodes the codes per row; prefill
// (PanelColumns) decodes a tile once for all rows, into the same lane order,
// and runs the same fp32 sequence, so both paths give the same bits.
//   int8          per 16 weights vpmovsxbd (from memory), vcvtdq2ps, vfmadd;
//                 per group and column one FMA by the scale.
//   int4, mxfp4   per 128 weights (a 64-byte line) and 16 of them: a shift
//                 by an immediate, vpermps over a 16-entry table of the
//                 codes' values (the nibble needs no masking: vpermps reads
//                 the low 4 bits of each index), vfmadd; lane l holds the
//                 codes 8l .. 8l + 7, so x is transposed once per call to
//                 match, and lane l is scaled by its own group's scale once
//                 per line.
// The tile's scales are converted to fp32 once (16 per instruction). Every
// variant pairs the same x and w; they differ from the generic one in lane
// order only (a difference of fp32 rounding). Prefetch: one per 64-byte line
// of each of the next tile's rows.
//
// Everything after the pragma is compiled for AVX-512 F/BW/VL/DQ and called
// only after cpuid says the CPU has it (QuantMatmulIsa).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/quant_scales_avx512.h"
#include "engine/backend/cpu/simd.h"
#include "engine/backend/weight_format.h"

namespace expertd::engine::cpu {
namespace {

// The panel path's per-thread scratch (`which` 0: x, 1: codes), at least n
// floats, 64-byte aligned, kept across calls. Compiled before the target
// pragma: the std::vector code it instantiates must stay baseline code (the
// linker may keep one copy of a template for every caller).
float* PanelScratch(int which, size_t n) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& b = buffers[which];
  if (b.size() < n + 16) b.resize(n + 16);
  const auto addr = reinterpret_cast<uintptr_t>(b.data());
  return reinterpret_cast<float*>((addr + 63) & ~uintptr_t{63});
}

}  // namespace
}  // namespace expertd::engine::cpu

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace expertd::engine::cpu {
namespace {

constexpr int kTileColumns = 8;
constexpr int64_t kMaxGroups = 512;  // per row: the tile's fp32 scales live on the stack
// A column's scales in a tile's array: 16 readable past the last (ChunkScales).
constexpr int64_t kScaleStride = kMaxGroups + 16;
// From this many rows on, a tile's codes are decoded once for all rows
// (PanelColumns) rather than once per row (Tile).
constexpr int64_t kPanelMinRows = 4;

inline float Sum16(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return HorizontalSum(_mm256_add_ps(lo, hi));
}

// Row r's outputs at columns [c0, c0 + C): each accumulator's lanes summed,
// + bias, (+ y).
template <int C>
inline void StoreRowSums(const MatmulParams& p, int64_t r, int64_t c0, const __m512* acc) {
  float* y = p.y + r * p.y_stride + c0;
  for (int c = 0; c < C; ++c) {
    float v = Sum16(acc[c]);
    if (!p.bias.empty()) v = v + LoadScalar(p.bias.data, p.bias.dtype, c0 + c);
    y[c] = p.accumulate ? y[c] + v : v;
  }
}

// The values of the 16 four-bit codes, as fp32.
alignas(64) constexpr float kInt4Values[16] = {0,  1,  2,  3,  4,  5,  6,  7,
                                               -8, -7, -6, -5, -4, -3, -2, -1};

template <WeightFormat F>
constexpr int64_t kWeightsPerLine = F == WeightFormat::kInt8 ? 64 : 128;

// 16 int8 codes of a row from column col, as fp32.
inline __m512 LoadInt8Codes(const uint8_t* row, int64_t col) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + col));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

// int8: C columns from c0, every row (fewer than kPanelMinRows): per column,
// per group, the group's lane sums scaled into the accumulator; the
// horizontal sum last.
template <int kG, int C>
void Tile(const MatmulParams& p, int64_t c0) {
  constexpr WeightFormat F = WeightFormat::kInt8;
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
                         _MM_HINT_T1);
        }
      }
#pragma GCC unroll 16
      for (int64_t g0 = i0; g0 < i0 + kChunk; g0 += kG) {
        __m512 part[C];
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) part[c] = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int64_t i = g0; i < g0 + kG; i += 16) {
          const __m512 xv = _mm512_loadu_ps(x + i);
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c)
            part[c] = _mm512_fmadd_ps(xv, LoadInt8Codes(w[c], i), part[c]);
        }
        const int64_t b = g0 / kG;
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
          acc[c] = _mm512_fmadd_ps(part[c], _mm512_set1_ps(scales[c][b]), acc[c]);
      }
    }
    StoreRowSums<C>(p, r, c0, acc);
  }
}

// 4-bit codes, 128 a row at a time (a 64-byte line): dword lane l of the
// line holds codes 8l .. 8l + 7, code 8l + t in bits 4t .. 4t + 3, so a
// shift by an immediate and one vpermps over the 16 values give vector t
// (lane l = code 8l + t) with no shifted broadcast per 16 codes (the
// broadcast-and-shift sequence was bound by its shuffles). x is transposed to
// match once per call (TransposeX: vector t of a chunk, lane l = x[8l + t]),
// and since lane l's codes lie in group (8l) / kG, each lane is scaled by its
// own group's scale (ChunkScales) once per chunk.
template <WeightFormat F>
inline __m512 ChunkCodes(__m512i line, int t, __m512 table) {
  return _mm512_permutexvar_ps(t == 0 ? line : _mm512_srli_epi32(line, 4 * t), table);
}

// Rows of x (m rows of k, at x with stride x_stride) into `out` (m rows of k)
// in ChunkCodes' order.
void TransposeX(const float* x, int64_t x_stride, int64_t m, int64_t k, float* out) {
  for (int64_t r = 0; r < m; ++r) {
    const float* in = x + r * x_stride;
    float* o = out + r * k;
    for (int64_t c = 0; c < k; c += 128) {
      for (int t = 0; t < 8; ++t) {
        for (int l = 0; l < 16; ++l) o[c + 16 * t + l] = in[c + 8 * l + t];
      }
    }
  }
}

// Chunk ch's lane scales of one column: lane l the scale of group
// (128 ch + 8 l) / kG; `scales` the column's fp32 scales (16 readable past
// its last group).
template <int kG>
inline __m512 ChunkScales(const float* scales, int64_t ch) {
  constexpr int kGroupsPerChunk = 128 / kG;
  const __m512 s = _mm512_loadu_ps(scales + ch * kGroupsPerChunk);
  if constexpr (kG == 128) return _mm512_permutexvar_ps(_mm512_setzero_si512(), s);
  const __m512i lane_group =
      kG == 32 ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
               : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(lane_group, s);
}

// C columns from c0, every row (fewer than kPanelMinRows), 4-bit codes: per
// column and chunk, the chunk's 8 vectors into `part`, then part times the
// lanes' scales into the accumulator; the horizontal sum last. xt: the rows
// of x in ChunkCodes' order (TransposeX).
template <WeightFormat F, int kG, int C>
void ChunkTile(const MatmulParams& p, const float* xt, int64_t c0) {
  const WeightQuant& q = p.w.quant;
  const int64_t k = p.w.cols, groups = k / kG;
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  const auto* base = static_cast<const uint8_t*>(p.w.data);
  alignas(64) float scales[C][kScaleStride];
  const uint8_t* w[C];
  for (int c = 0; c < C; ++c) {
    w[c] = base + (c0 + c) * row_bytes;
    ScalesToF32(q, ((c0 + c) / q.block_rows) * groups, groups, scales[c]);
  }
  const __m512 table = _mm512_loadu_ps(F == WeightFormat::kInt4 ? kInt4Values : kE2m1Values);
  const uint8_t* next = base + (c0 + C) * row_bytes;
  const bool prefetch = c0 + 2 * C <= p.w.rows;
  for (int64_t r = 0; r < p.m; ++r) {
    const float* x = xt + r * k;
    __m512 acc[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t ch = 0; ch < k / 128; ++ch) {
      if (prefetch && r == 0) {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
          _mm_prefetch(reinterpret_cast<const char*>(next + c * row_bytes + 64 * ch), _MM_HINT_T1);
      }
      __m512i line[C];
      __m512 part[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        line[c] = _mm512_loadu_si512(w[c] + 64 * ch);
        part[c] = _mm512_setzero_ps();
      }
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        const __m512 xv = _mm512_load_ps(x + 128 * ch + 16 * t);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
          part[c] = _mm512_fmadd_ps(xv, ChunkCodes<F>(line[c], t, table), part[c]);
      }
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        acc[c] = _mm512_fmadd_ps(part[c], ChunkScales<kG>(scales[c], ch), acc[c]);
    }
    StoreRowSums<C>(p, r, c0, acc);
  }
}

// The scale of a span of x and w in the panel: int8 runs Tile's sequence
// (a span is a group, one scale for every lane), 4-bit codes ChunkTile's (a
// span is a 128-value chunk, each lane its own group's scale).
template <int kG>
struct GroupSpans {
  static constexpr int64_t kSpan = kG;
  static __m512 Scale(const float* column_scales, int64_t span) {
    return _mm512_set1_ps(column_scales[span]);
  }
};
template <int kG>
struct ChunkSpans {
  static constexpr int64_t kSpan = 128;
  static __m512 Scale(const float* column_scales, int64_t span) {
    return ChunkScales<kG>(column_scales, span);
  }
};

// Prefill (many rows): the tile's codes are decoded once into fp32 (`w`, C
// rows of k, unscaled; 4-bit codes in ChunkCodes' order) and reused by every
// row; x is copied (4-bit: transposed, TransposeX) once per call (`x`, m rows
// of k). Per (row, column) the operations are exactly Tile's (4-bit:
// ChunkTile's): same values, lane order, part / scale / accumulator sequence
// (Spans: GroupSpans or ChunkSpans), horizontal sum, so the results are
// bitwise those of the one-row path: batch invariance holds across the
// switch. Register tile: R rows x CC columns share each x and w load.
template <typename Spans, int R, int CC>
void PanelMicro(const MatmulParams& p, const float* x, const float* w, const float* scales,
                int64_t r0, int64_t c0) {
  constexpr int64_t kSpan = Spans::kSpan;
  const int64_t k = p.w.cols;
  __m512 acc[R][CC];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < CC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < k / kSpan; ++b) {
    __m512 part[R][CC];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < CC; ++c) part[r][c] = _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int64_t i = b * kSpan; i < (b + 1) * kSpan; i += 16) {
      __m512 wv[CC];
#pragma GCC unroll 8
      for (int c = 0; c < CC; ++c) wv[c] = _mm512_load_ps(w + c * k + i);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        __m512 xv = _mm512_load_ps(x + r * k + i);
        // Held in a register: GCC would otherwise fold the load into each
        // of the CC FMAs (CC loads instead of one; loads then bound the tile).
        __asm__("" : "+v"(xv));
#pragma GCC unroll 8
        for (int c = 0; c < CC; ++c) part[r][c] = _mm512_fmadd_ps(xv, wv[c], part[r][c]);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < CC; ++c) {
      const __m512 s = Spans::Scale(scales + c * kScaleStride, b);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(part[r][c], s, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) StoreRowSums<CC>(p, r0 + r, c0, acc[r]);
}

// Rows [r0, r0 + R) x the tile's `cols` columns from c0: three at a time
// (R = 4: 24 accumulators, 7 loads per 12 FMAs), then the rest.
template <typename Spans, int R>
void PanelRows(const MatmulParams& p, const float* x, const float* w, const float* scales,
               int64_t r0, int64_t c0, int cols) {
  const int64_t k = p.w.cols;
  int c = 0;
  for (; c + 3 <= cols; c += 3) {
    PanelMicro<Spans, R, 3>(p, x + r0 * k, w + c * k, scales + c * kScaleStride, r0, c0 + c);
  }
  if (cols - c == 2) {
    PanelMicro<Spans, R, 2>(p, x + r0 * k, w + c * k, scales + c * kScaleStride, r0, c0 + c);
  } else if (cols - c == 1) {
    PanelMicro<Spans, R, 1>(p, x + r0 * k, w + c * k, scales + c * kScaleStride, r0, c0 + c);
  }
}

template <WeightFormat F, int kG>
void PanelBlock(const MatmulParams& p, int64_t c0, int64_t c1) {
  const WeightQuant& q = p.w.quant;
  const int64_t k = p.w.cols, m = p.m, groups = k / kG;
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  const auto* base = static_cast<const uint8_t*>(p.w.data);
  // Unaligned load: kE2m1Values (weight_format.h) has no 64-byte alignment.
  const __m512 table = _mm512_loadu_ps(F == WeightFormat::kInt4 ? kInt4Values : kE2m1Values);
  constexpr bool kChunked = F != WeightFormat::kInt8;  // ChunkTile's order
  float* x_buf = PanelScratch(0, m * k);
  float* w_buf = PanelScratch(1, kTileColumns * k);
  if constexpr (kChunked) {
    TransposeX(p.x, p.x_stride, m, k, x_buf);
  } else {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; i += 16)
        _mm512_store_ps(x_buf + r * k + i, _mm512_loadu_ps(p.x + r * p.x_stride + i));
    }
  }
  alignas(64) float scales[kTileColumns * kScaleStride];
  for (int64_t c = c0; c < c1; c += kTileColumns) {
    const int cols = static_cast<int>(c1 - c < kTileColumns ? c1 - c : kTileColumns);
    for (int j = 0; j < cols; ++j) {
      ScalesToF32(q, ((c + j) / q.block_rows) * groups, groups, scales + j * kScaleStride);
      const uint8_t* row = base + (c + j) * row_bytes;
      if constexpr (kChunked) {
        for (int64_t ch = 0; ch < k / 128; ++ch) {
          const __m512i line = _mm512_loadu_si512(row + 64 * ch);
#pragma GCC unroll 8
          for (int t = 0; t < 8; ++t)
            _mm512_store_ps(w_buf + j * k + 128 * ch + 16 * t, ChunkCodes<F>(line, t, table));
        }
      } else {
        for (int64_t i = 0; i < k; i += 16)
          _mm512_store_ps(w_buf + j * k + i, LoadInt8Codes(row, i));
      }
    }
    using Spans = std::conditional_t<kChunked, ChunkSpans<kG>, GroupSpans<kG>>;
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) PanelRows<Spans, 4>(p, x_buf, w_buf, scales, r, c, cols);
    for (; r < m; ++r) PanelRows<Spans, 1>(p, x_buf, w_buf, scales, r, c, cols);
  }
}

// Rows in blocks of about 4 MiB of x (at least 4 rows), so the per-thread
// scratch stays bounded whatever m is (a skewed prefill may route thousands of
// tokens to one expert); each block decodes the tiles again.
template <WeightFormat F, int kG>
void PanelColumns(const MatmulParams& p, int64_t c0, int64_t c1) {
  const int64_t k = p.w.cols;
  const int64_t block = ((1 << 20) / k < 4 ? 4 : (1 << 20) / k) / 4 * 4;
  for (int64_t r0 = 0; r0 < p.m; r0 += block) {
    MatmulParams rows = p;
    rows.x = p.x + r0 * p.x_stride;
    rows.y = p.y + r0 * p.y_stride;
    rows.m = p.m - r0 < block ? p.m - r0 : block;
    PanelBlock<F, kG>(rows, c0, c1);
  }
}

template <WeightFormat F, int kG>
void Columns(const MatmulParams& p, int64_t c0, int64_t c1) {
  if (p.m >= kPanelMinRows) return PanelColumns<F, kG>(p, c0, c1);
  int64_t c = c0;
  if constexpr (F != WeightFormat::kInt8) {
    float* xt = PanelScratch(0, p.m * p.w.cols);
    TransposeX(p.x, p.x_stride, p.m, p.w.cols, xt);
    for (; c + kTileColumns <= c1; c += kTileColumns) ChunkTile<F, kG, kTileColumns>(p, xt, c);
    for (; c < c1; ++c) ChunkTile<F, kG, 1>(p, xt, c);
    return;
  }
  for (; c + kTileColumns <= c1; c += kTileColumns) Tile<kG, kTileColumns>(p, c);
  for (; c < c1; ++c) Tile<kG, 1>(p, c);
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
