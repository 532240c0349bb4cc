// Quantized experts (int8, int4, mxfp4; groups of 32, 64 or 128) with int8
// activations (MatmulActivations::kInt8) on AVX-512-VNNI: x is quantized to
// int8 per 32-block and each block's products are exact integer sums
// (vpdpbusd: four u8 x s8 products into an s32 lane), so a block costs 8
// instructions per 16 columns and row where the bf16 kernel needs 16.
//
// Element (r, c), x quantized as reference_ops.h's QuantizeInt8Block: one
// fp32 accumulator; per 32-block b, the integer sum S of q * code (mxfp4's
// e2m1 codes doubled into integers, its scales halved), then
// acc = fma(float(S), scale[c, group of b] * d[r, b], acc); + bias, (+ y).
// S is exact, so the order inside a block is free, and the fp32 sequence is
// the same for every m, tile and split: batch-invariant.
//
// vpdpbusd multiplies UNSIGNED bytes by signed ones: the weights are the
// unsigned side, shifted by a bias (int8 + 128, int4 + 8, doubled e2m1 + 12),
// and each block's sum starts from -bias * sum(q), computed once per row.
//
// Lanes are output columns: a unit regroups 32 columns' codes (a transpose
// of 4-byte pieces) into a panel where one 64-byte vector holds 4 codes of
// each of 16 columns, and x's four matching bytes are broadcast to every
// lane, so no horizontal sums are needed. 4-bit codes come out of a 4-byte
// piece as the even codes (low nibbles) then the odd ones. One row (decode)
// skips the panel: RowUnit multiplies each column's codes in their own
// lanes and sums the lanes after (the same integers). For 4-bit codes it
// takes a column's 64 bytes (128 codes) at once: the low nibbles are one
// vector of even codes, the high nibbles (a 16-bit shift) one of odd codes,
// each a single vpternlogd from the bytes. So x's 4-bit layout is per chunk
// of 128 values (XChunkOffsets): the even values of its groups of 8 (4
// bytes a group), then the odd ones; the panel tiles read their 4 bytes
// from there.
//
// x is quantized once per Matmul / GroupedMatmul call (QuantizeAllRowsInt8)
// and read by every unit; MatmulUnit alone quantizes its own rows
// (QuantMatmulUnitInt8). Without VNNI, quant_matmul_avx2_int8.cc computes
// the same bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/column_lanes_avx512.h"
#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/quant_scales_avx512.h"
#include "engine/backend/cpu/simd.h"
#include "engine/backend/weight_format.h"
#include "engine/backend/weight_quantize.h"

namespace expertd::engine::cpu::internal {
namespace {

// Per-thread scratch of at least n bytes, 64-byte aligned (baseline code:
// the std::vector instantiation must not be AVX-512 code).
uint8_t* Scratch(size_t n) {
  thread_local std::vector<uint8_t> b;
  if (b.size() < n + 64) b.resize(n + 64);
  const auto addr = reinterpret_cast<uintptr_t>(b.data());
  return reinterpret_cast<uint8_t*>((addr + 63) & ~uintptr_t{63});
}

}  // namespace
}  // namespace expertd::engine::cpu::internal

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

namespace expertd::engine::cpu::internal {
namespace {

constexpr int kTileRows = 4;
constexpr int kColBlocks = kInt8TileCols / 16;
constexpr int kSteps = 8;  // vpdpbusd steps per 32-block: 4 codes a lane each

template <WeightFormat F>
constexpr int32_t kCodeBias = F == WeightFormat::kInt8   ? 128
                              : F == WeightFormat::kInt4 ? 8
                                                         : 12;

// Doubled e2m1 values + 12, by nibble (sign bit 3), for vpshufb.
// clang-format off
alignas(16) constexpr int8_t kE2m1Biased[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                12, 11, 10,  9,  8,  6,  4,  0};
// clang-format on

// Where 32-block b's bytes of a row of x are, for 4-bit formats: the row
// is cut into chunks of 128 values (the last one may hold 32, 64 or 96);
// a chunk with G groups of 8 values stores each group's 4 even values at
// 4 * group and its 4 odd ones at 4 * G + 4 * group. Block b is the chunk's
// groups 4 (b % 4) .. 4 (b % 4) + 3: its 16 even values start at `even`,
// its 16 odd ones at even + odd_delta.
struct XChunkOffsets {
  XChunkOffsets(int64_t k, int64_t b) {
    const int64_t chunk_start = 128 * (b / 4);
    even = chunk_start + 16 * (b % 4);
    odd_delta = std::min<int64_t>(128, k - chunk_start) / 2;
  }
  int64_t even;
  int64_t odd_delta;
};

template <WeightFormat F>
void QuantizeRows(const MatmulParams& p, int64_t r0, int64_t r1, const Int8Rows& out) {
  const int64_t k = p.w.cols, blocks = k / 32;
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i hi = _mm512_set1_epi32(127), lo = _mm512_set1_epi32(-127);
  // Per 128-bit half: the 8 even values of its two groups, then the 8 odd.
  const __m256i evens_then_odds =
      _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12,
                       14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = p.x + r * p.x_stride;
    const int64_t i = r - r0;
    for (int64_t b = 0; b < blocks; ++b) {
      const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
      const __m512i m = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v0), abs_mask),
                                         _mm512_and_si512(_mm512_castps_si512(v1), abs_mask));
      const uint32_t amax_bits = _mm512_reduce_max_epu32(m);
      float amax;
      std::memcpy(&amax, &amax_bits, sizeof(amax));
      const float d = amax / 127.0f;
      __m512i q0 = _mm512_setzero_si512(), q1 = _mm512_setzero_si512();
      if (d >= 1.17549435e-38f && std::isfinite(d)) {
        const __m512 id = _mm512_set1_ps(1.0f / d);
        q0 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id)), hi), lo);
        q1 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id)), hi), lo);
      }
      __m256i bytes = _mm256_set_m128i(_mm512_cvtepi32_epi8(q1), _mm512_cvtepi32_epi8(q0));
      int8_t* row = out.codes + i * k;
      if constexpr (F == WeightFormat::kInt8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 32 * b), bytes);
      } else {
        // The block's 16 even values, then its 16 odd ones (XChunkOffsets).
        bytes = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(bytes, evens_then_odds),
                                         _MM_SHUFFLE(3, 1, 2, 0));
        const XChunkOffsets at(k, b);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + at.even), _mm256_castsi256_si128(bytes));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(row + at.even + at.odd_delta),
                         _mm256_extracti128_si256(bytes, 1));
      }
      out.d[i * blocks + b] = d;
      out.corr[i * blocks + b] = -kCodeBias<F> * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
  }
}

// Decode reads each weight once, from DRAM: while one tile of columns is
// computed, the next tile's bytes (its rows lie back to back: one run of
// memory) are prefetched into L2 in address order, an even share per step,
// and its scales the same way. On the huge pages the weights live on
// (host_buffer.h) address order beat prefetching the next tile's 16 rows at
// the offset being read (16 streams at once) by 5-10% (BM_GroupedDecode);
// on 4 KiB pages, where each 2 KiB row is half a page run, it had been the
// other way round (1.25x).
class NextTilePrefetch {
 public:
  NextTilePrefetch(const MatmulParams& p, uint64_t row_bytes, int64_t c, int cols, int64_t steps) {
    steps = std::max<int64_t>(1, steps);
    const int64_t next_cols =
        std::max<int64_t>(0, std::min<int64_t>(kInt8TileCols, p.w.rows - c - cols));
    values_ = static_cast<const char*>(p.w.data) + (c + cols) * row_bytes;
    values_end_ = values_ + next_cols * row_bytes;
    const uint64_t scale_row_bytes = QuantScaleBytes(p.w.quant, 1, p.w.cols);
    scales_ = static_cast<const char*>(p.w.quant.scales) + (c + cols) * scale_row_bytes;
    scales_end_ = scales_ + next_cols * scale_row_bytes;
    value_lines_per_step_ = ((values_end_ - values_ + 63) / 64 + steps - 1) / steps;
    scale_lines_per_step_ = ((scales_end_ - scales_ + 63) / 64 + steps - 1) / steps;
  }
  // One of the `steps` the tile takes.
  void Step() {
    for (int64_t i = 0; i < value_lines_per_step_ && values_ < values_end_; ++i, values_ += 64)
      _mm_prefetch(values_, _MM_HINT_T1);
    for (int64_t i = 0; i < scale_lines_per_step_ && scales_ < scales_end_; ++i, scales_ += 64)
      _mm_prefetch(scales_, _MM_HINT_T1);
  }

 private:
  const char* values_;
  const char* values_end_;
  const char* scales_;
  const char* scales_end_;
  int64_t value_lines_per_step_;
  int64_t scale_lines_per_step_;
};

// Rows of the 16 columns of block cb at columns [c, c + cols); lanes past
// cols repeat the last column (the stores mask them off).
inline void BlockRows(const MatmulParams& p, uint64_t row_bytes, int64_t c, int cols, int cb,
                      const uint8_t* rows[16]) {
  const int lanes = std::min(16, cols - 16 * cb);
  for (int l = 0; l < 16; ++l) {
    rows[l] =
        static_cast<const uint8_t*>(p.w.data) + (c + 16 * cb + std::min(l, lanes - 1)) * row_bytes;
  }
}

// The scales of columns [c, c + cols) (mxfp4's halved, for its doubled
// codes) at scales + (cb * groups + g) * 16 + l; column_scales: room for
// 16 x groups. Scales of whole 16-byte pieces per column: transposed as
// stored (TransposeF16Scales, TransposeE8m0Scales); others: each column's
// scales as fp32, then transposed to 16 lanes a group, four groups at a
// time.
void BuildScales(const MatmulParams& p, int64_t c, int cols, float* scales, float* column_scales) {
  const WeightQuant& q = p.w.quant;
  const int64_t groups = p.w.cols / q.group_size;
  const float scale_factor = q.format == WeightFormat::kMxfp4 ? 0.5f : 1.0f;
  const __m512 factor = _mm512_set1_ps(scale_factor);
  for (int cb = 0; cb * 16 < cols; ++cb) {
    const int lanes = std::min(16, cols - 16 * cb);
    const uint8_t* scale_col[16];
    const bool f16 = q.scale_dtype == ScaleDType::kF16 && groups % 8 == 0 && scale_factor == 1.0f;
    const bool e8m0 = q.scale_dtype == ScaleDType::kE8M0 && groups % 16 == 0;
    if (f16 || e8m0) {
      const int64_t row_bytes = groups * (f16 ? 2 : 1);
      for (int l = 0; l < 16; ++l) {
        scale_col[l] = static_cast<const uint8_t*>(q.scales) +
                       (c + 16 * cb + std::min(l, lanes - 1)) * row_bytes;
      }
      if (f16) {
        TransposeF16Scales(scale_col, groups, scales + cb * groups * 16);
      } else {
        TransposeE8m0Scales(scale_col, groups, factor, scales + cb * groups * 16);
      }
      continue;
    }
    for (int l = 0; l < 16; ++l) {
      float* own = column_scales + l * groups;
      ScalesToF32(q, (c + 16 * cb + std::min(l, lanes - 1)) * groups, groups, own);
      scale_col[l] = reinterpret_cast<const uint8_t*>(own);
    }
    float* s = scales + cb * groups * 16;
    int64_t g = 0;
    for (; g + 4 <= groups; g += 4) {
      __m512i v[4];
      TransposeColumns(scale_col, g * 4, v);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
        _mm512_store_ps(s + (g + j) * 16, _mm512_mul_ps(_mm512_castsi512_ps(v[j]), factor));
    }
    for (; g < groups; ++g) {
      for (int l = 0; l < 16; ++l)
        s[g * 16 + l] = reinterpret_cast<const float*>(scale_col[l])[g] * scale_factor;
    }
  }
}

// Columns [c, c + cols) (cols <= kInt8TileCols) regrouped for the tiles:
// column block cb (lane l = column c + 16 cb + l), 32-block b, step s at
// panel + ((cb * blocks + b) * kSteps + s) * 64, each lane's four codes as
// unsigned bytes code + bias.
template <WeightFormat F>
void BuildPanel(const MatmulParams& p, int64_t c, int cols, uint8_t* panel) {
  const int64_t k = p.w.cols, blocks = k / 32;
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i e2m1 =
      _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kE2m1Biased)));
  NextTilePrefetch prefetch(p, row_bytes, c, cols, (cols + 15) / 16 * blocks);
  for (int cb = 0; cb * 16 < cols; ++cb) {
    const uint8_t* col[16];
    BlockRows(p, row_bytes, c, cols, cb, col);
    uint8_t* out = panel + cb * blocks * kSteps * 64;
    for (int64_t b = 0; b < blocks; ++b, out += kSteps * 64) {
      prefetch.Step();
      __m512i v[8];
      if constexpr (F == WeightFormat::kInt8) {
        TransposeColumns(col, 32 * b, v);
        TransposeColumns(col, 32 * b + 16, v + 4);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j)
          _mm512_store_si512(out + 64 * j, _mm512_xor_si512(v[j], _mm512_set1_epi8(-128)));
      } else {
        TransposeColumns(col, 16 * b, v);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          __m512i even = _mm512_and_si512(v[j], nibble);
          __m512i odd = _mm512_and_si512(_mm512_srli_epi32(v[j], 4), nibble);
          if constexpr (F == WeightFormat::kInt4) {
            even = _mm512_xor_si512(even, _mm512_set1_epi8(8));
            odd = _mm512_xor_si512(odd, _mm512_set1_epi8(8));
          } else {
            even = _mm512_shuffle_epi8(e2m1, even);
            odd = _mm512_shuffle_epi8(e2m1, odd);
          }
          _mm512_store_si512(out + 64 * (2 * j), even);
          _mm512_store_si512(out + 64 * (2 * j + 1), odd);
        }
      }
    }
  }
}

// Column block cb's scales in 16 lanes a group, for the one-row kernel.
// Where BuildScales transposes the stored pieces (fp16 scales in whole
// 8-group pieces, E8M0 in 16-group ones), the kernel transposes them here a
// piece at a time as it reaches its groups: the same work spread among the
// code loads instead of a burst at the tile's start while no read is in
// flight (int8 one-row GEMV 1.14x faster, BM_GemmActivations). Other
// layouts come from BuildScales.
class RowScales {
 public:
  // built: BuildScales' output for the tile, or null when Windowed(p).
  RowScales(const MatmulParams& p, int64_t c, int cols, int cb, const float* built)
      : built_(built), factor_(_mm512_set1_ps(0.5f)) {
    const WeightQuant& q = p.w.quant;
    const int64_t groups = p.w.cols / q.group_size;
    if (built_ != nullptr) {
      built_ += cb * groups * 16;
      return;
    }
    f16_ = q.scale_dtype == ScaleDType::kF16;
    piece_ = f16_ ? 8 : 16;
    begin_ = -piece_;
    const int64_t row_bytes = groups * (f16_ ? 2 : 1);
    const int lanes = std::min(16, cols - 16 * cb);
    for (int l = 0; l < 16; ++l) {
      col_[l] = static_cast<const uint8_t*>(q.scales) +
                (c + 16 * cb + std::min(l, lanes - 1)) * row_bytes;
    }
  }
  // Whether p's scales are transposed here (BuildScales' fast paths).
  static bool Windowed(const MatmulParams& p) {
    const WeightQuant& q = p.w.quant;
    const int64_t groups = p.w.cols / q.group_size;
    if (q.scale_dtype == ScaleDType::kF16)
      return q.format != WeightFormat::kMxfp4 && groups % 8 == 0;
    return q.scale_dtype == ScaleDType::kE8M0 && q.format == WeightFormat::kMxfp4 &&
           groups % 16 == 0;
  }
  // The 16 lanes of group g; groups are asked for in increasing order.
  __attribute__((always_inline)) const float* Group(int64_t g) {
    if (built_ != nullptr) return built_ + g * 16;
    if (g >= begin_ + piece_) Fill(g - g % piece_);
    return window_ + (g - begin_) * 16;
  }

 private:
  void Fill(int64_t begin) {
    begin_ = begin;
    if (f16_) {
      TransposeF16ScalesOf8(col_, begin, window_);
    } else {
      TransposeE8m0ScalesOf16(col_, begin, factor_, window_);  // mxfp4's halved
    }
  }

  const float* built_;
  __m512 factor_;
  bool f16_ = false;
  int64_t piece_ = 0;
  int64_t begin_ = 0;
  const uint8_t* col_[16];
  alignas(64) float window_[16 * 16];
};

// A column's 64 int8 codes (two 32-blocks; `pair` false: the first only, a
// row's odd last block) at `codes` as vpdpbusd's unsigned bytes (code +
// 128); lanes left out are 128 (x's are zero there).
inline __m512i RowInt8Codes(const uint8_t* codes, bool pair) {
  const __m512i v =
      pair ? _mm512_loadu_si512(codes)
           : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  return _mm512_xor_si512(v, _mm512_set1_epi8(-128));
}

// A column's bytes of 4-bit codes (byte i: code 2i in the low nibble, 2i + 1
// in the high one) as vpdpbusd's unsigned bytes: byte i of `even` is code 2i
// + bias, of `odd` code 2i + 1 + bias. One instruction each for int4 (the
// 16-bit shift brings the high nibbles down; the select clears the bits
// above and flips bit 3: (v & 7) | (~v & 8) = code + 8), two for mxfp4 (a
// mask, then vpshufb's table of the biased, doubled e2m1 values).
template <WeightFormat F>
inline void NibbleCodes(__m512i v, __m512i* even, __m512i* odd) {
  const __m512i high = _mm512_srli_epi16(v, 4);
  if constexpr (F == WeightFormat::kInt4) {
    const __m512i seven = _mm512_set1_epi8(7), eight = _mm512_set1_epi8(8);
    *even = _mm512_ternarylogic_epi32(v, seven, eight, 0xCA);  // v ? seven : eight, bitwise
    *odd = _mm512_ternarylogic_epi32(high, seven, eight, 0xCA);
  } else {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m512i e2m1 =
        _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kE2m1Biased)));
    *even = _mm512_shuffle_epi8(e2m1, _mm512_and_si512(v, nibble));
    *odd = _mm512_shuffle_epi8(e2m1, _mm512_and_si512(high, nibble));
  }
}

// One row (the unit's row i, matrix row r) at columns [c, c + cols),
// without a panel: with one row each code is used once, so the transposes
// a panel needs cost more than the products. Per column, its codes in
// their own lanes against x's bytes (int8: 64 codes, two 32-blocks, a step;
// 4-bit: 128 codes, four blocks, as even and odd codes against x's even
// and odd values), then 16 columns' lanes are summed into the blocks' sums:
// the same integers as the panel tiles, the same fp32 epilogue. scales:
// BuildScales' output, or null where RowScales::Windowed(p).
template <WeightFormat F>
void RowUnit(const MatmulParams& p, const Int8Rows& xr, int64_t i, int64_t r, int64_t c, int cols,
             const float* scales, const float* bias) {
  const int64_t k = p.w.cols, blocks = k / 32;
  // Groups of 32, 64 or 128 (UsesInt8Dot): block b is in group b >> shift.
  const int group_shift = __builtin_ctz(static_cast<unsigned>(p.w.quant.group_size / 32));
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  constexpr bool kFourBit = F != WeightFormat::kInt8;
  constexpr int64_t kBlocksPerStep = kFourBit ? 4 : 2;
  NextTilePrefetch prefetch(p, row_bytes, c, cols,
                            (cols + 15) / 16 * ((blocks + kBlocksPerStep - 1) / kBlocksPerStep));
  const int8_t* x = xr.codes + i * k;
  for (int cb = 0; cb * 16 < cols; ++cb) {
    const uint8_t* col[16];
    BlockRows(p, row_bytes, c, cols, cb, col);
    __m512 acc = _mm512_setzero_ps();
    RowScales s(p, c, cols, cb, scales);
    auto finish_block = [&](int64_t b, __m512i sum) {
      sum = _mm512_add_epi32(sum, _mm512_set1_epi32(xr.corr[i * blocks + b]));
      const __m512 scale = _mm512_mul_ps(_mm512_load_ps(s.Group(b >> group_shift)),
                                         _mm512_set1_ps(xr.d[i * blocks + b]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc);
    };
    if constexpr (kFourBit) {
      for (int64_t b = 0; b < blocks; b += 4) {
        prefetch.Step();
        // The row's last chunk may hold 1-3 blocks (16 bytes of codes and of
        // x's even and odd values each): the rest of the lanes load zeros.
        const int64_t nb = std::min<int64_t>(4, blocks - b);
        const __mmask64 bytes = nb == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * nb)) - 1;
        const XChunkOffsets at(k, b);
        const __m512i x_even = _mm512_maskz_loadu_epi8(bytes, x + at.even);
        const __m512i x_odd = _mm512_maskz_loadu_epi8(bytes, x + at.even + at.odd_delta);
        __m512i part[16];
#pragma GCC unroll 16
        for (int l = 0; l < 16; ++l) {
          __m512i even, odd;
          NibbleCodes<F>(_mm512_maskz_loadu_epi8(bytes, col[l] + 16 * b), &even, &odd);
          part[l] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), even, x_even),
                                        odd, x_odd);
        }
        __m512i sums[4];
        ReduceSixteenByQuarter(part, sums);
        if (nb == 4) {
#pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) finish_block(b + q, sums[q]);
        } else {
          for (int64_t q = 0; q < nb; ++q) finish_block(b + q, sums[q]);
        }
      }
    } else {
      for (int64_t b = 0; b < blocks; b += 2) {
        prefetch.Step();
        // An odd last block: its 32 codes in the low lanes, x zero above.
        const bool pair = b + 2 <= blocks;
        const __m512i xv = pair ? _mm512_loadu_si512(x + 32 * b)
                                : _mm512_zextsi256_si512(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(x + 32 * b)));
        __m512i part[16];
#pragma GCC unroll 16
        for (int l = 0; l < 16; ++l)
          part[l] =
              _mm512_dpbusd_epi32(_mm512_setzero_si512(), RowInt8Codes(col[l] + 32 * b, pair), xv);
        __m512i first, second;
        ReduceSixteen(part, &first, &second);
        finish_block(b, first);
        if (pair) finish_block(b + 1, second);
      }
    }
    const int lanes = std::min(16, cols - 16 * cb);
    const auto mask = static_cast<__mmask16>((1u << lanes) - 1);
    __m512 v = acc;
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + 16 * cb));
    float* y = p.y + r * p.y_stride + c + 16 * cb;
    if (p.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
    _mm512_mask_storeu_ps(y, mask, v);
  }
}

// Rows [r, r + R) (row r is the unit's row i) x column blocks [0, CB) of
// the panel at columns [c, c + cols). bias: the columns' bias, or null.
// kFourBit: x is in the 4-bit formats' layout (XChunkOffsets).
template <bool kFourBit, int R, int CB>
void Tile(const MatmulParams& p, const Int8Rows& xr, int64_t i, int64_t r, int64_t c, int cols,
          const uint8_t* panel, const float* scales, const float* bias) {
  const int64_t k = p.w.cols, blocks = k / 32, groups = k / p.w.quant.group_size;
  const int64_t blocks_per_group = p.w.quant.group_size / 32;
  __m512 acc[R][CB];
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
#pragma GCC unroll 2
    for (int cb = 0; cb < CB; ++cb) acc[rr][cb] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    // Step s's 4 bytes of x: the block's plain bytes, or (4-bit) piece s / 2's
    // even values for even s, its odd ones for odd s.
    int64_t even = 32 * b, odd = 32 * b;
    if constexpr (kFourBit) {
      const XChunkOffsets at(k, b);
      even = at.even;
      odd = at.even + at.odd_delta;
    }
    __m512i sum[R][CB];
#pragma GCC unroll 4
    for (int rr = 0; rr < R; ++rr) {
      const __m512i init = _mm512_set1_epi32(xr.corr[(i + rr) * blocks + b]);
#pragma GCC unroll 2
      for (int cb = 0; cb < CB; ++cb) sum[rr][cb] = init;
    }
#pragma GCC unroll 8
    for (int s = 0; s < kSteps; ++s) {
      __m512i w[CB];
#pragma GCC unroll 2
      for (int cb = 0; cb < CB; ++cb)
        w[cb] = _mm512_load_si512(panel + ((cb * blocks + b) * kSteps + s) * 64);
#pragma GCC unroll 4
      for (int rr = 0; rr < R; ++rr) {
        int32_t four;
        const int64_t at = kFourBit ? (s % 2 == 0 ? even : odd) + 4 * (s / 2) : even + 4 * s;
        std::memcpy(&four, xr.codes + (i + rr) * k + at, sizeof(four));
        const __m512i xv = _mm512_set1_epi32(four);
#pragma GCC unroll 2
        for (int cb = 0; cb < CB; ++cb) sum[rr][cb] = _mm512_dpbusd_epi32(sum[rr][cb], w[cb], xv);
      }
    }
    const int64_t g = b / blocks_per_group;
#pragma GCC unroll 4
    for (int rr = 0; rr < R; ++rr) {
      const __m512 d = _mm512_set1_ps(xr.d[(i + rr) * blocks + b]);
#pragma GCC unroll 2
      for (int cb = 0; cb < CB; ++cb) {
        const __m512 scale = _mm512_mul_ps(_mm512_load_ps(scales + (cb * groups + g) * 16), d);
        acc[rr][cb] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[rr][cb]), scale, acc[rr][cb]);
      }
    }
  }
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
#pragma GCC unroll 2
    for (int cb = 0; cb < CB; ++cb) {
      const int lanes = std::min(16, cols - 16 * cb);
      const auto mask = static_cast<__mmask16>((1u << lanes) - 1);
      __m512 v = acc[rr][cb];
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + 16 * cb));
      float* y = p.y + (r + rr) * p.y_stride + c + 16 * cb;
      if (p.accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, y), v);
      _mm512_mask_storeu_ps(y, mask, v);
    }
  }
}

template <bool kFourBit, int R>
void TileAnyCols(const MatmulParams& p, const Int8Rows& xr, int64_t i, int64_t r, int64_t c,
                 int cols, const uint8_t* panel, const float* scales, const float* bias) {
  static_assert(kColBlocks == 2);
  if (cols > 16) return Tile<kFourBit, R, 2>(p, xr, i, r, c, cols, panel, scales, bias);
  Tile<kFourBit, R, 1>(p, xr, i, r, c, cols, panel, scales, bias);
}

template <bool kFourBit>
void TileAny(int rows, const MatmulParams& p, const Int8Rows& xr, int64_t i, int64_t r, int64_t c,
             int cols, const uint8_t* panel, const float* scales, const float* bias) {
  switch (rows) {
    case 4:
      return TileAnyCols<kFourBit, 4>(p, xr, i, r, c, cols, panel, scales, bias);
    case 3:
      return TileAnyCols<kFourBit, 3>(p, xr, i, r, c, cols, panel, scales, bias);
    case 2:
      return TileAnyCols<kFourBit, 2>(p, xr, i, r, c, cols, panel, scales, bias);
    case 1:
      return TileAnyCols<kFourBit, 1>(p, xr, i, r, c, cols, panel, scales, bias);
    default:
      return;
  }
}

template <WeightFormat F>
void Unit(const MatmulParams& p, const Int8Rows& xr, int64_t r0, int64_t r1, int64_t c0,
          int64_t c1) {
  const int64_t k = p.w.cols, blocks = k / 32, groups = k / p.w.quant.group_size;
  const size_t panel_bytes = static_cast<size_t>(kColBlocks * blocks * kSteps * 64);
  uint8_t* panel = Scratch(panel_bytes + (kColBlocks + 1) * 16 * groups * sizeof(float));
  auto* scales = reinterpret_cast<float*>(panel + panel_bytes);
  float* column_scales = scales + kColBlocks * 16 * groups;
  alignas(64) float bias[kInt8TileCols];
  for (int64_t c = c0; c < c1; c += kInt8TileCols) {
    const int cols = static_cast<int>(std::min<int64_t>(kInt8TileCols, c1 - c));
    if (!p.bias.empty()) {
      for (int j = 0; j < kInt8TileCols; ++j)
        bias[j] = j < cols ? LoadScalar(p.bias.data, p.bias.dtype, c + j) : 0.0f;
    }
    if (r1 - r0 == 1) {
      const bool windowed = RowScales::Windowed(p);
      if (!windowed) BuildScales(p, c, cols, scales, column_scales);
      RowUnit<F>(p, xr, 0, r0, c, cols, windowed ? nullptr : scales,
                 p.bias.empty() ? nullptr : bias);
      continue;
    }
    BuildScales(p, c, cols, scales, column_scales);
    BuildPanel<F>(p, c, cols, panel);
    for (int64_t r = r0; r < r1; r += kTileRows) {
      TileAny<F != WeightFormat::kInt8>(static_cast<int>(std::min<int64_t>(kTileRows, r1 - r)), p,
                                        xr, r - r0, r, c, cols, panel, scales,
                                        p.bias.empty() ? nullptr : bias);
    }
  }
}

}  // namespace

void QuantizeRowsInt8Avx512Vnni(const MatmulParams& p, int64_t r0, int64_t r1,
                                const Int8Rows& out) {
  switch (p.w.quant.format) {
    case WeightFormat::kInt8:
      return QuantizeRows<WeightFormat::kInt8>(p, r0, r1, out);
    case WeightFormat::kInt4:
      return QuantizeRows<WeightFormat::kInt4>(p, r0, r1, out);
    case WeightFormat::kMxfp4:
      return QuantizeRows<WeightFormat::kMxfp4>(p, r0, r1, out);
    default:  // excluded by UsesInt8Dot
      return;
  }
}

void QuantMatmulUnitAvx512VnniQuantized(const MatmulParams& p, const Int8Rows& xr, int64_t r0,
                                        int64_t r1, int64_t c0, int64_t c1) {
  switch (p.w.quant.format) {
    case WeightFormat::kInt8:
      return Unit<WeightFormat::kInt8>(p, xr, r0, r1, c0, c1);
    case WeightFormat::kInt4:
      return Unit<WeightFormat::kInt4>(p, xr, r0, r1, c0, c1);
    case WeightFormat::kMxfp4:
      return Unit<WeightFormat::kMxfp4>(p, xr, r0, r1, c0, c1);
    default:  // excluded by UsesInt8Dot
      return;
  }
}

}  // namespace expertd::engine::cpu::internal

#pragma GCC pop_options
