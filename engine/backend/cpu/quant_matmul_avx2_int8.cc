// Quantized experts (int8, int4, mxfp4; groups of 32, 64 or 128) with int8
// activations (MatmulActivations::kInt8) on CPUs without AVX-512-VNNI: the
// AVX2 twin of quant_matmul_avx512vnni.cc, the same sequence to the bit.
// Most x86 servers a model is offloaded to have AVX2 only; this is the
// kernel llama.cpp's Q4_0 x Q8_0 dot product is built on there.
//
// x is quantized per 32-block as reference_ops.h's QuantizeInt8Block, and
// each block's sum S of q * code is exact in integers, so the order inside a
// block is free; per block, acc = fma(float(S), scale[c, group] * d[r, b],
// acc) with one fp32 accumulator per element: batch-invariant, bitwise the
// scalar reference and the VNNI kernel.
//
// AVX2's byte product, vpmaddubsw, multiplies UNSIGNED bytes by signed ones
// into saturating int16 pairs. 4-bit codes are the unsigned side, biased
// (int4 + 8, doubled e2m1 + 12: pairs stay below 2 * 24 * 127), and a
// block's sum starts from -bias * sum(q) (Int8Rows::corr). int8 codes
// cannot be biased (2 * 255 * 127 saturates): |code| is the unsigned side
// and x takes the code's sign (vpsignb), at most 2 * 128 * 127 a pair.
// vpmaddwd against ones widens the pairs into 8 int32 lanes.
//
// A tile is one row by 8 columns. Lanes hold one column's products; the 8
// columns' vectors are summed into one vector of their 8 block sums by a
// tree of vphaddd, so the fp32 epilogue runs on 8 elements at once. 4-bit
// codes go two blocks at a time: a column's 32 bytes hold blocks b and b + 1
// (16 bytes each), so its low nibbles are one vector of both blocks' even
// codes, its high nibbles (a 16-bit shift) one of their odd codes, and one
// vpshufb each maps nibbles to biased codes; the two vpmaddubsw results add
// in int16 without saturating (2 * 2 * 24 * 127), and the reduction tree
// leaves block b's sums in the low half of each vector and b + 1's in the
// high half, so two blocks cost one tree. x's 4-bit layout matches: per
// pair of blocks, the 16 even values of the first, of the second, then the
// 16 odd values of the first, of the second; a row's odd last block: its
// evens, then its odds.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/quant_matmul_tile.h"
#include "engine/backend/cpu/simd.h"
#include "engine/backend/weight_format.h"
#include "engine/backend/weight_quantize.h"

namespace expertd::engine::cpu::internal {
namespace {

template <WeightFormat F>
constexpr int32_t kCodeBias = F == WeightFormat::kInt8   ? 0
                              : F == WeightFormat::kInt4 ? 8
                                                         : 12;

// Nibble -> biased code, for vpshufb. int4: two's complement + 8 = n ^ 8.
// mxfp4: doubled e2m1 values + 12 (sign bit 3).
// clang-format off
alignas(16) constexpr int8_t kInt4Biased[16] = {8, 9, 10, 11, 12, 13, 14, 15,
                                                0, 1,  2,  3,  4,  5,  6,  7};
alignas(16) constexpr int8_t kE2m1Biased[16] = {12, 13, 14, 15, 16, 18, 20, 24,
                                                12, 11, 10,  9,  8,  6,  4,  0};
// clang-format on

inline int32_t HorizontalMaxU32(__m256i v) {
  v = _mm256_max_epu32(v, _mm256_permute2x128_si256(v, v, 1));
  v = _mm256_max_epu32(v, _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm256_max_epu32(v, _mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm256_cvtsi256_si32(v);
}

inline int32_t HorizontalSumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

template <WeightFormat F>
void QuantizeRows(const MatmulParams& p, int64_t r0, int64_t r1, const Int8Rows& out) {
  const int64_t k = p.w.cols, blocks = k / 32;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i hi = _mm256_set1_epi8(127), lo = _mm256_set1_epi8(-127);
  // packs works per 128-bit half: dwords (0, 4, 1, 5, ...) put the 4-byte
  // pieces back in order.
  const __m256i unpack = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // Per 128-bit half: its 8 even values, then its 8 odd ones.
  const __m256i evens_then_odds =
      _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12,
                       14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = p.x + r * p.x_stride;
    const int64_t i = r - r0;
    for (int64_t b = 0; b < blocks; ++b) {
      __m256 v[4];
      __m256i m = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        v[j] = _mm256_loadu_ps(x + 32 * b + 8 * j);
        m = _mm256_max_epu32(m, _mm256_and_si256(_mm256_castps_si256(v[j]), abs_mask));
      }
      const auto amax_bits = static_cast<uint32_t>(HorizontalMaxU32(m));
      float amax;
      std::memcpy(&amax, &amax_bits, sizeof(amax));
      const float d = amax / 127.0f;
      __m256i bytes = _mm256_setzero_si256();
      if (d >= 1.17549435e-38f && std::isfinite(d)) {
        const __m256 id = _mm256_set1_ps(1.0f / d);
        __m256i q[4];
        for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id));
        bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        bytes = _mm256_permutevar8x32_epi32(bytes, unpack);
        bytes = _mm256_max_epi8(_mm256_min_epi8(bytes, hi), lo);
      }
      if constexpr (F != WeightFormat::kInt8) {
        bytes = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(bytes, evens_then_odds),
                                         _MM_SHUFFLE(3, 1, 2, 0));
      }
      int8_t* row = out.codes + i * k;
      if (F == WeightFormat::kInt8 || (b + 1 == blocks && b % 2 == 0)) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(row + 32 * b), bytes);
      } else {
        // The pair's evens at +0 (this block's at + 16 (b % 2)), odds at +32.
        int8_t* pair = row + 64 * (b / 2) + 16 * (b % 2);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(pair), _mm256_castsi256_si128(bytes));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(pair + 32), _mm256_extracti128_si256(bytes, 1));
      }
      out.d[i * blocks + b] = d;
      int32_t corr = 0;
      if constexpr (kCodeBias<F> != 0) {
        const int32_t sum =
            HorizontalSumI32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, bytes), ones16));
        corr = -kCodeBias<F> * sum;
      }
      out.corr[i * blocks + b] = corr;
    }
  }
}

// Block b's 32 codes of a column's row of codes, as the product's unsigned
// side takes them: 4-bit (a row's odd last block): biased, the 16 even codes
// then the 16 odd ones; int8: as stored (signed; BlockProducts takes |code|).
template <WeightFormat F>
inline __m256i BlockCodes(const uint8_t* codes, int64_t b, __m256i table) {
  if constexpr (F == WeightFormat::kInt8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * b));
  } else {
    const __m256i both = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16 * b)));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(table, nibbles);
  }
}

// 8 int32 lanes summing to the block's sum of code * x (4-bit: of the
// biased codes).
template <WeightFormat F>
inline __m256i BlockProducts(__m256i codes, __m256i x) {
  __m256i pairs;
  if constexpr (F == WeightFormat::kInt8) {
    pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(codes), _mm256_sign_epi8(x, codes));
  } else {
    pairs = _mm256_maddubs_epi16(codes, x);
  }
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// Blocks b and b + 1 of a 4-bit column (32 bytes): 8 int32 lanes, the low 4
// summing to block b's sum of biased code * x, the high 4 to b + 1's.
// table: kInt4Biased or kE2m1Biased in both halves.
inline __m256i PairProducts(const uint8_t* codes, int64_t b, __m256i table, __m256i x_even,
                            __m256i x_odd) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 16 * b));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i even = _mm256_shuffle_epi8(table, _mm256_and_si256(v, nibble));
  const __m256i odd = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
  const __m256i pairs =
      _mm256_add_epi16(_mm256_maddubs_epi16(even, x_even), _mm256_maddubs_epi16(odd, x_odd));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// v[j]'s lanes summed per 128-bit half: lane j of *low the sum of v[j]'s
// low half, of *high of its high half.
inline void SumEachHalf(const __m256i v[8], __m256i* low, __m256i* high) {
  const __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
  *low = _mm256_permute2x128_si256(ab, cd, 0x20);
  *high = _mm256_permute2x128_si256(ab, cd, 0x31);
}

// Lane j: the sum of v[j]'s 8 lanes.
inline __m256i SumEach(const __m256i v[8]) {
  __m256i low, high;
  SumEachHalf(v, &low, &high);
  return _mm256_add_epi32(low, high);
}

// TileScale's instantiations are per variant (quant_matmul_tile.h): ours.
struct Avx2Int8Variant {};
inline float ScaleF32(const WeightQuant& q, int64_t i) { return TileScale<Avx2Int8Variant>(q, i); }

constexpr int kTileCols = 8;

// A tile: columns [c, c + cols), cols <= 8; lanes past cols repeat the last
// column (their results are not stored).
struct Tile {
  const uint8_t* rows[kTileCols];
  // scales[g * 8 + l]: column l's scale of group g, fp32 (mxfp4's halved,
  // for its doubled codes).
  float* scales;
};

// 8 scales of one column (groups [g, g + 8)) as fp32: fp16 by F16C, E8M0
// as its exponent bits (0: 2^-127, 255: NaN, as E8m0ToF32).
inline __m256 EightScales(const WeightQuant& q, int64_t i) {
  if (q.scale_dtype == ScaleDType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(q.scales) + i)));
  }
  const __m256i e = _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(q.scales) + i)));
  __m256i bits = _mm256_slli_epi32(e, 23);
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000),
                            _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7fc00000),
                            _mm256_cmpeq_epi32(e, _mm256_set1_epi32(255)));
  return _mm256_castsi256_ps(bits);
}

// v[l] (lane j) -> v[j] (lane l).
inline void Transpose8x8(__m256 v[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    for (int h = 0; h < 2; ++h) {
      const __m256 a = t[4 * i + h], b = t[4 * i + 2 + h];
      u[4 * i + 2 * h] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * i + 2 * h + 1] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    }
  }
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    v[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}

// Per tile, once: at one scale per 32 codes, converting scales one at a
// time cost as much as the products (perf: a third of the kernel's time).
void BuildTile(const MatmulParams& p, uint64_t row_bytes, int64_t c, int cols, float* scales,
               Tile* t) {
  const WeightQuant& q = p.w.quant;
  const int64_t groups = p.w.cols / q.group_size;
  const float factor = q.format == WeightFormat::kMxfp4 ? 0.5f : 1.0f;
  const bool vector = q.scale_dtype == ScaleDType::kF16 || q.scale_dtype == ScaleDType::kE8M0;
  t->scales = scales;
  int64_t first[kTileCols];
  for (int l = 0; l < kTileCols; ++l) {
    const int64_t col = c + std::min(l, cols - 1);
    t->rows[l] = static_cast<const uint8_t*>(p.w.data) + col * row_bytes;
    first[l] = col * groups;
  }
  int64_t g = 0;
  for (; vector && g + 8 <= groups; g += 8) {
    __m256 v[kTileCols];
    for (int l = 0; l < kTileCols; ++l) v[l] = EightScales(q, first[l] + g);
    Transpose8x8(v);
    for (int j = 0; j < 8; ++j)
      _mm256_store_ps(scales + (g + j) * kTileCols, _mm256_mul_ps(v[j], _mm256_set1_ps(factor)));
  }
  for (; g < groups; ++g) {
    for (int l = 0; l < kTileCols; ++l)
      scales[g * kTileCols + l] = ScaleF32(q, first[l] + g) * factor;
  }
}

// Stores lanes [0, cols) of acc as row r's columns [c, c + cols): + bias,
// (+ y), as the other kernels do.
inline void StoreRow(const MatmulParams& p, int64_t r, int64_t c, int cols, __m256 acc) {
  alignas(32) float v[kTileCols];
  _mm256_store_ps(v, acc);
  float* y = p.y + r * p.y_stride + c;
  for (int l = 0; l < cols; ++l) {
    float e = v[l];
    if (!p.bias.empty()) e = e + LoadScalar(p.bias.data, p.bias.dtype, c + l);
    y[l] = p.accumulate ? y[l] + e : e;
  }
}

// The next tile's bytes, fetched into L2 while a tile is computed: its
// scales at once when the tile starts (BuildTile reads them before any code;
// left to the hardware, their 8 short streams stalled it for half as long
// as the products took), its codes (the rows of consecutive columns: one run
// of memory) an even share per step. Scales at once rather than spread
// ahead of the codes: int4 / mxfp4 decode 1.2-1.3x faster (BM_GroupedDecode,
// 3 alternated runs), the step loop no longer choosing between two ranges.
class NextTile {
 public:
  // No bytes when `fetch` is false (the tile's later rows).
  NextTile(const MatmulParams& p, uint64_t row_bytes, int64_t c, int cols, int64_t steps,
           bool fetch) {
    const int64_t next_cols =
        fetch ? std::max<int64_t>(0, std::min<int64_t>(kTileCols, p.w.rows - c - cols)) : 0;
    const uint64_t scale_row_bytes = QuantScaleBytes(p.w.quant, 1, p.w.cols);
    const char* scales = static_cast<const char*>(p.w.quant.scales) + (c + cols) * scale_row_bytes;
    for (const char* end = scales + next_cols * scale_row_bytes; scales < end; scales += 64)
      _mm_prefetch(scales, _MM_HINT_T1);
    codes_ = static_cast<const char*>(p.w.data) + (c + cols) * row_bytes;
    end_ = codes_ + next_cols * row_bytes;
    lines_per_step_ = ((end_ - codes_ + 63) / 64 + steps - 1) / std::max<int64_t>(1, steps);
  }
  void Step() {
    const char* stop = std::min(end_, codes_ + 64 * lines_per_step_);
    for (; codes_ < stop; codes_ += 64) _mm_prefetch(codes_, _MM_HINT_T1);
  }

 private:
  const char* codes_;
  const char* end_;
  int64_t lines_per_step_;
};

// One row (the unit's row i) at the tile's 8 columns, stepping `next`.
template <WeightFormat F>
__m256 RowTile(const MatmulParams& p, const Int8Rows& xr, int64_t i, const Tile& t,
               NextTile& next) {
  const int64_t k = p.w.cols, blocks = k / 32;
  const int group_shift = __builtin_ctz(static_cast<unsigned>(p.w.quant.group_size / 32));
  const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(
      reinterpret_cast<const __m128i*>(F == WeightFormat::kInt4 ? kInt4Biased : kE2m1Biased)));
  const int8_t* x = xr.codes + i * k;
  __m256 acc = _mm256_setzero_ps();
  auto finish_block = [&](int64_t b, __m256i sum) {
    sum = _mm256_add_epi32(sum, _mm256_set1_epi32(xr.corr[i * blocks + b]));
    const __m256 scale = _mm256_mul_ps(_mm256_load_ps(t.scales + (b >> group_shift) * kTileCols),
                                       _mm256_set1_ps(xr.d[i * blocks + b]));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scale, acc);
  };
  constexpr int64_t kStep = F == WeightFormat::kInt8 ? 1 : 2;
  for (int64_t b = 0; b < blocks; b += kStep) {
    next.Step();
    __m256i part[kTileCols];
    if (kStep == 2 && b + 1 < blocks) {
      const __m256i x_even = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * b));
      const __m256i x_odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * b + 32));
#pragma GCC unroll 8
      for (int l = 0; l < kTileCols; ++l)
        part[l] = PairProducts(t.rows[l], b, table, x_even, x_odd);
      __m256i first, second;
      SumEachHalf(part, &first, &second);
      finish_block(b, first);
      finish_block(b + 1, second);
      continue;
    }
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * b));
#pragma GCC unroll 8
    for (int l = 0; l < kTileCols; ++l)
      part[l] = BlockProducts<F>(BlockCodes<F>(t.rows[l], b, table), xv);
    finish_block(b, SumEach(part));
  }
  return acc;
}

// Per-thread scratch of at least n bytes, 64-byte aligned.
uint8_t* Scratch(size_t n) {
  thread_local std::vector<uint8_t> b;
  if (b.size() < n + 64) b.resize(n + 64);
  const auto addr = reinterpret_cast<uintptr_t>(b.data());
  return reinterpret_cast<uint8_t*>((addr + 63) & ~uintptr_t{63});
}

template <WeightFormat F>
void Unit(const MatmulParams& p, const Int8Rows& xr, int64_t r0, int64_t r1, int64_t c0,
          int64_t c1) {
  const int64_t k = p.w.cols, groups = k / p.w.quant.group_size;
  const uint64_t row_bytes = QuantValueBytes(F, 1, k);
  auto* scales = reinterpret_cast<float*>(Scratch(kTileCols * groups * sizeof(float)));
  for (int64_t c = c0; c < c1; c += kTileCols) {
    const int cols = static_cast<int>(std::min<int64_t>(kTileCols, c1 - c));
    Tile t;
    BuildTile(p, row_bytes, c, cols, scales, &t);
    // Each weight row is read from DRAM once (the rows loop runs inside, on
    // the tile's bytes in L1): the first row fetches the next tile.
    const int64_t blocks = k / 32;
    const int64_t steps = F == WeightFormat::kInt8 ? blocks : (blocks + 1) / 2;
    for (int64_t r = r0; r < r1; ++r) {
      NextTile next(p, row_bytes, c, cols, steps, r == r0);
      StoreRow(p, r, c, cols, RowTile<F>(p, xr, r - r0, t, next));
    }
  }
}

}  // namespace

void QuantizeRowsInt8Avx2(const MatmulParams& p, int64_t r0, int64_t r1, const Int8Rows& out) {
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

void QuantMatmulUnitAvx2Int8Quantized(const MatmulParams& p, const Int8Rows& xr, int64_t r0,
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
