// Quantized experts (int8, int4, mxfp4 in groups of 32, 64 or 128; FP8
// E4M3 in column blocks of 32, 64 or 128 that divide k) with bf16
// activations (MatmulActivations::kBF16) on AVX-512-BF16. Every code of
// these formats is exactly a bf16 value (|int8| <= 128, int4, e2m1, e4m3),
// so a tile's codes are decoded once into bf16 and the products run on
// vdpbf16ps like the dense bf16-activation kernel; the scales stay fp32
// (FP8: its 2-D block grid, row0 included).
//
// Element (r, c), x rounded to bf16 (nearest even) as matmul_avx512bf16.cc
// does: a 16-lane accumulator acc; per group b, a 16-lane part, zero, takes
// one vdpbf16ps per 32-block of the group (lane j: codes 2j + 1, then 2j),
// then acc = fma(part, scale[c, b], acc); the end is the dense sequence's
// (lanes j + (j + 8), HorizontalSum), + bias, (+ y). The same for every m,
// tile and split: batch-invariant. reference_ops.h has the scalar form.
//
// A unit decodes kTileCols columns at a time into a thread-local panel
// (bf16 codes, fp32 scales), then runs 4-row x 6-column register tiles over
// it; decode (m < 4) is the same with one row tile.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/quant_scales_avx512.h"
#include "engine/backend/cpu/row_sums_avx512.h"
#include "engine/backend/cpu/simd.h"
#include "engine/backend/weight_format.h"
#include "engine/backend/weight_quantize.h"

namespace expertd::engine::cpu::internal {
namespace {

// Per-thread scratch of at least n 16-bit values, 64-byte aligned (baseline
// code: the std::vector instantiation must not be AVX-512 code).
uint16_t* Scratch(int which, size_t n) {
  thread_local std::vector<uint16_t> buffers[2];
  std::vector<uint16_t>& b = buffers[which];
  if (b.size() < n + 32) b.resize(n + 32);
  const auto addr = reinterpret_cast<uintptr_t>(b.data());
  return reinterpret_cast<uint16_t*>((addr + 63) & ~uintptr_t{63});
}

float* ScaleScratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace
}  // namespace expertd::engine::cpu::internal

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,f16c")

namespace expertd::engine::cpu::internal {
namespace {

constexpr int kTileRows = 4;
constexpr int kTileCols = 6;  // 24 accumulators + up to 4 code blocks + scale + part = 31 zmm

// The 16 four-bit codes' values as bf16 bit patterns, twice (vpermw reads 5
// index bits): int4's two's complement 0..7, -8..-1, and e2m1's
// (kE2m1Values). The kernel test checks them against DecodeQuantValue.
// clang-format off
alignas(64) constexpr uint16_t kInt4Bf16[32] = {
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0,
    0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80,
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0,
    0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80};
alignas(64) constexpr uint16_t kE2m1Bf16[32] = {
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0,
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};
// clang-format on

inline __m512i FourBitTable(WeightFormat f) {
  return _mm512_load_si512(f == WeightFormat::kMxfp4 ? kE2m1Bf16 : kInt4Bf16);
}

// An E4M3 magnitude (a code's low 7 bits) as a bf16 bit pattern: every E4M3
// value is exactly a normal bf16 (the smallest, the subnormal 2^-9, too: the
// dot product's flush to zero never meets one); 0x7f is NaN.
constexpr uint16_t E4m3MagnitudeBf16(int mag) {
  if (mag == 0x7f) return 0x7fc0;
  if (mag == 0) return 0;
  int e = mag >> 3, m = mag & 7;  // value 2^(e - 7) * 1.m, or 2^-6 * 0.m for e == 0
  if (e == 0) {
    for (e = 1; m < 8; m <<= 1) --e;  // normalize the subnormal
    m &= 7;
  }
  return static_cast<uint16_t>(((e + 120) << 7) | (m << 4));
}

// The FP8 decoding's constants: the bf16 patterns' low and high bytes per
// magnitude (two vpermi2b tables each), and the byte order that makes the
// two byte-interleaves (vpunpcklbw / vpunpckhbw, which work within 16-byte
// lanes) give codes 0-31 and 32-63 in order: byte 16 L + j holds code 8 L + j
// for j < 8, code 32 + 8 L + (j - 8) after.
struct Fp8DecodeTables {
  alignas(64) uint8_t low[128];
  alignas(64) uint8_t high[128];
  alignas(64) uint8_t order[64];
};
constexpr Fp8DecodeTables MakeFp8DecodeTables() {
  Fp8DecodeTables t{};
  for (int i = 0; i < 128; ++i) {
    t.low[i] = static_cast<uint8_t>(E4m3MagnitudeBf16(i) & 0xff);
    t.high[i] = static_cast<uint8_t>(E4m3MagnitudeBf16(i) >> 8);
  }
  for (int lane = 0; lane < 4; ++lane) {
    for (int j = 0; j < 8; ++j) {
      t.order[16 * lane + j] = static_cast<uint8_t>(8 * lane + j);
      t.order[16 * lane + 8 + j] = static_cast<uint8_t>(32 + 8 * lane + j);
    }
  }
  return t;
}
constexpr Fp8DecodeTables kFp8Decode = MakeFp8DecodeTables();

// 64 E4M3 codes (32 if !kPair: the rest of the load is zeros and out[1]
// is not written) as bf16: the magnitude's two bytes looked up (bits 0-6 of
// a code index 128 entries), the sign put on the high byte, interleaved.
template <bool kPair>
inline void DecodeFp8(const uint8_t* codes, __m512i* out) {
  const __m512i raw =
      kPair ? _mm512_loadu_si512(codes)
            : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  const __m512i c = _mm512_permutexvar_epi8(_mm512_load_si512(kFp8Decode.order), raw);
  const __m512i low = _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Decode.low), c,
                                               _mm512_load_si512(kFp8Decode.low + 64));
  const __m512i high = _mm512_ternarylogic_epi32(  // high | (c & 0x80)
      _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Decode.high), c,
                               _mm512_load_si512(kFp8Decode.high + 64)),
      c, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  out[0] = _mm512_unpacklo_epi8(low, high);
  if constexpr (kPair) out[1] = _mm512_unpackhi_epi8(low, high);
}

// Codes [i, i + 32) of a row as 32 bf16 values.
template <WeightFormat F>
inline __m512i DecodeBlock(const uint8_t* row, int64_t i, __m512i table) {
  if constexpr (F == WeightFormat::kInt8) {
    const __m512 a = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
    const __m512 b = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i + 16))));
    const __m512bh h = _mm512_cvtne2ps_pbh(b, a);
    return reinterpret_cast<const __m512i&>(h);
  } else if constexpr (F == WeightFormat::kFp8E4m3Block) {
    __m512i w;
    DecodeFp8<false>(row + i, &w);
    return w;
  } else {
    // 16 bytes, the low nibble the even code: interleave low and high
    // nibbles into 32 codes in order, then look their values up.
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i / 2));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    const __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    return _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(codes), table);
  }
}

// A column's k codes as bf16 into out.
template <WeightFormat F>
void DecodeColumn(const uint8_t* row, int64_t k, __m512i table, uint16_t* out) {
  int64_t i = 0;
  if constexpr (F == WeightFormat::kFp8E4m3Block) {
    for (; i + 64 <= k; i += 64) {
      __m512i w[2];
      DecodeFp8<true>(row + i, w);
      _mm512_store_si512(out + i, w[0]);
      _mm512_store_si512(out + i + 32, w[1]);
    }
  }
  for (; i < k; i += 32) _mm512_store_si512(out + i, DecodeBlock<F>(row, i, table));
}

// Rows [r0, r0 + R) x columns [c0, c0 + C). kB: 32-blocks per group.
// Column j's scales at scales + j * groups. Prefill (!kDirect): its codes
// from the panel, at codes + j * k. Decode (kDirect): codes decoded from the
// weights in registers, the next tile's codes prefetched (each weight is
// used once: no panel to amortize).
template <WeightFormat F, bool kDirect, int R, int C, int kB>
void Tile(const MatmulParams& p, const uint16_t* xb, int64_t r0, int64_t c0, const uint16_t* codes,
          const float* scales) {
  const int64_t k = p.w.cols, groups = k / (32 * kB);
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  const uint8_t* rows[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c)
    rows[c] = static_cast<const uint8_t*>(p.w.data) + (c0 + c) * row_bytes;
  const __m512i table = FourBitTable(F);
  const uint64_t group_bytes = row_bytes / groups;
  const bool prefetch = kDirect && c0 + 2 * C <= p.w.rows;
  __m512 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < groups; ++b) {
    const int64_t i0 = b * 32 * kB;
    if (prefetch) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        for (uint64_t off = 0; off < group_bytes; off += 64)
          _mm_prefetch(
              reinterpret_cast<const char*>(rows[c] + C * row_bytes + b * group_bytes + off),
              _MM_HINT_T1);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m512bh w[kB];
      __m512 s;
#pragma GCC unroll 4
      for (int q = 0; q < kB; ++q) {
        if constexpr (kDirect && F == WeightFormat::kFp8E4m3Block && kB % 2 == 0) {
          if (q % 2 == 0) {  // two blocks per decoding
            __m512i pair[2];
            DecodeFp8<true>(rows[c] + i0 + 32 * q, pair);
            w[q] = (__m512bh)pair[0];
            w[q + 1] = (__m512bh)pair[1];
          }
          continue;
        }
        w[q] = kDirect ? (__m512bh)DecodeBlock<F>(rows[c], i0 + 32 * q, table)
                       : (__m512bh)_mm512_load_si512(codes + c * k + i0 + 32 * q);
      }
      s = _mm512_set1_ps(scales[c * groups + b]);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m512 part = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int q = 0; q < kB; ++q)
          part =
              _mm512_dpbf16_ps(part, (__m512bh)_mm512_load_si512(xb + r * k + i0 + 32 * q), w[q]);
        acc[r][c] = _mm512_fmadd_ps(part, s, acc[r][c]);
      }
    }
  }
  StoreTileSums<R, C>(p, r0, c0, acc);
}

template <WeightFormat F, bool kDirect, int R, int kB>
void TileAnyCols(int cols, const MatmulParams& p, const uint16_t* xb, int64_t r0, int64_t c0,
                 const uint16_t* codes, const float* scales) {
  switch (cols) {
    case 6:
      return Tile<F, kDirect, R, 6, kB>(p, xb, r0, c0, codes, scales);
    case 5:
      return Tile<F, kDirect, R, 5, kB>(p, xb, r0, c0, codes, scales);
    case 4:
      return Tile<F, kDirect, R, 4, kB>(p, xb, r0, c0, codes, scales);
    case 3:
      return Tile<F, kDirect, R, 3, kB>(p, xb, r0, c0, codes, scales);
    case 2:
      return Tile<F, kDirect, R, 2, kB>(p, xb, r0, c0, codes, scales);
    case 1:
      return Tile<F, kDirect, R, 1, kB>(p, xb, r0, c0, codes, scales);
    default:
      return;
  }
}

template <WeightFormat F, bool kDirect, int kB>
void TileAny(int rows, int cols, const MatmulParams& p, const uint16_t* xb, int64_t r0, int64_t c0,
             const uint16_t* codes, const float* scales) {
  switch (rows) {
    case 4:
      return TileAnyCols<F, kDirect, 4, kB>(cols, p, xb, r0, c0, codes, scales);
    case 3:
      return TileAnyCols<F, kDirect, 3, kB>(cols, p, xb, r0, c0, codes, scales);
    case 2:
      return TileAnyCols<F, kDirect, 2, kB>(cols, p, xb, r0, c0, codes, scales);
    case 1:
      return TileAnyCols<F, kDirect, 1, kB>(cols, p, xb, r0, c0, codes, scales);
    default:
      return;
  }
}

template <WeightFormat F, int kB>
void Unit(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const WeightQuant& q = p.w.quant;
  const int64_t k = p.w.cols, groups = k / q.group_size;
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  uint16_t* xb = Scratch(0, static_cast<size_t>((r1 - r0) * k));
  RoundRowsToBf16(p, r0, r1, k, xb);  // k % 32 == 0: no tail
  uint16_t* codes = Scratch(1, static_cast<size_t>(kTileCols * k));
  float* scales = ScaleScratch(static_cast<size_t>(kTileCols * groups));
  const __m512i table = FourBitTable(F);
  const uint8_t* base = static_cast<const uint8_t*>(p.w.data);
  const bool decode = r1 - r0 < kTileRows;  // every weight used by under 4 rows
  for (int64_t c = c0; c < c1; c += kTileCols) {
    const int cols = static_cast<int>(std::min<int64_t>(kTileCols, c1 - c));
    for (int j = 0; j < cols; ++j)
      ScalesToF32(q, ((q.row0 + c + j) / q.block_rows) * groups, groups, scales + j * groups);
    if (decode) {
      TileAny<F, true, kB>(static_cast<int>(r1 - r0), cols, p, xb, r0, c, nullptr, scales);
      continue;
    }
    for (int j = 0; j < cols; ++j)
      DecodeColumn<F>(base + (c + j) * row_bytes, k, table, codes + j * k);
    for (int64_t r = r0; r < r1; r += kTileRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kTileRows, r1 - r));
      TileAny<F, false, kB>(rows, cols, p, xb + (r - r0) * k, r, c, codes, scales);
    }
  }
}

template <WeightFormat F>
void UnitFor(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  switch (p.w.quant.group_size / 32) {
    case 1:
      return Unit<F, 1>(p, r0, r1, c0, c1);
    case 2:
      return Unit<F, 2>(p, r0, r1, c0, c1);
    case 4:
      return Unit<F, 4>(p, r0, r1, c0, c1);
    default:  // excluded by UsesBf16Dot
      return;
  }
}

}  // namespace

void QuantMatmulUnitAvx512Bf16(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1) {
  switch (p.w.quant.format) {
    case WeightFormat::kInt8:
      return UnitFor<WeightFormat::kInt8>(p, r0, r1, c0, c1);
    case WeightFormat::kInt4:
      return UnitFor<WeightFormat::kInt4>(p, r0, r1, c0, c1);
    case WeightFormat::kMxfp4:
      return UnitFor<WeightFormat::kMxfp4>(p, r0, r1, c0, c1);
    case WeightFormat::kFp8E4m3Block:
      return UnitFor<WeightFormat::kFp8E4m3Block>(p, r0, r1, c0, c1);
    default:  // excluded by UsesBf16Dot
      return;
  }
}

}  // namespace expertd::engine::cpu::internal

#pragma GCC pop_options
