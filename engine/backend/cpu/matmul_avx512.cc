// The AVX-512 dense matmul (matmul_dense.h): for m >= 4 rows with any dense
// weights, and for bf16 weights at any m.
//
// fp32 / fp16 weights (the 8-lane sequence). Per unit, columns go in panels
// of kPanelPairs column pairs; each panel is widened to fp32 once into a
// thread-local buffer, laid out per k step s (8 elements, the last
// zero-padded) and pair j as 16 floats:
//   w[c + 2j][8s .. 8s + 8)  w[c + 2j + 1][8s .. 8s + 8)
// (a missing odd column is zeros). A tile of R <= 4 rows x C <= 6 pairs then
// runs k / 8 steps of: R broadcasts of x[r][8s .. 8s + 8) to both halves of
// a zmm, C aligned loads of the panel, R x C FMAs. Lane l of the accumulator
// half for (r, c) is exactly lane l of the AVX2 kernel's accumulator for
// (r, c) (same products, same FMA order), and the halves are reduced with
// HorizontalSum's additions (a row's twelve at once: row_sums_avx512.h): the
// result is bitwise matmul_avx2.cc's.
//
// bf16 weights (the 32-block even / odd sequence). x rows are permuted once
// per unit (PermuteBf16Rows). m >= 4: panels of kBf16PanelCols columns are
// widened once, per 32-block b and column j as 32 floats: the even elements
// w[c + j][32b + 2i] then the odd ones w[c + j][32b + 2i + 1] (i < 16); a
// tile of R <= 4 rows x C <= 6 columns keeps one zmm accumulator per element
// (24) and runs, per block, R x C FMAs with the even x and weights, then R x C
// with the odd. m < 4 (decode): tiles of R rows x 2-4 columns read the
// weights directly: one 64-byte load per column and block, a shift gives the
// even weights and an and the odd ones (exact). Either way lane j of the
// accumulator sees the products the sequence prescribes, in its order; the
// halves are added and reduced by HorizontalSum, as matmul_avx2.cc's tiles do
// (row_sums_avx512.h: a row's sums at once).
//
// The build's baseline is AVX2, so everything below the pragma is compiled
// for AVX-512 and only ever called after cpuid says the CPU has it
// (DenseMatmulIsa). Headers are included before the pragma so their inline
// functions stay baseline code.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/matmul_rows.h"
#include "engine/backend/cpu/row_sums_avx512.h"
#include "engine/backend/cpu/simd.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

namespace expertd::engine::cpu::internal {
namespace {

constexpr int kTileRows = 4;
constexpr int kTilePairs = 6;  // 4 x 6 accumulators + 4 x + 1 w = 29 zmm
constexpr int kPanelPairs = 2 * kTilePairs;
constexpr int kPairFloats = 16;

// Elements [a, a + 8) and [b, b + 8) of the weights as one 16-lane fp32
// vector (exact widening).
template <DType D>
inline __m512 LoadPair(const void* data, int64_t a, int64_t b) {
  if constexpr (D == DType::kF32) {
    const float* f = static_cast<const float*>(data);
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(f + a)),
                              _mm256_loadu_ps(f + b), 1);
  } else {
    const __m128i* h = reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + a);
    const __m128i* g = reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(data) + b);
    const __m256i v =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(h)), _mm_loadu_si128(g), 1);
    if constexpr (D == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
    } else {
      return _mm512_cvtph_ps(v);
    }
  }
}

// Packs columns [c0, c0 + cols) (cols <= 2 * pairs) as `pairs` pairs: the
// layout above with a step stride of pairs * 16 floats, one 64-byte store per
// pair and step.
template <DType D>
void PackPanelAs(const WeightRef& w, int64_t c0, int64_t cols, int pairs, float* out) {
  using E = std::conditional_t<D == DType::kF32, float, uint16_t>;
  const int64_t k = w.cols, full = k / 8, tail = k % 8;
  const int64_t stride = int64_t{pairs} * kPairFloats;
  for (int64_t j = 0; j < pairs; ++j) {
    const int64_t a = (c0 + 2 * j) * k;
    const bool has_b = 2 * j + 1 < cols;
    const int64_t b = has_b ? a + k : a;
    const __mmask16 keep = has_b ? 0xFFFF : 0x00FF;
    float* dst = out + j * kPairFloats;
    // Each weight row is its own page-sized stream, which hardware
    // prefetchers restart cold: fetch the next pair's rows one pair ahead.
    const char* next = static_cast<const char*>(w.data) + (a + 2 * k) * sizeof(E);
    const bool prefetch = c0 + 2 * j + 3 < w.rows;
    for (int64_t s = 0; s < full; ++s) {
      if (prefetch && (s * 8 * sizeof(E)) % 64 == 0) {
        _mm_prefetch(next + s * 8 * sizeof(E), _MM_HINT_T1);
        _mm_prefetch(next + (k + s * 8) * sizeof(E), _MM_HINT_T1);
      }
      _mm512_store_ps(dst + s * stride,
                      _mm512_maskz_mov_ps(keep, LoadPair<D>(w.data, a + 8 * s, b + 8 * s)));
    }
    if (tail > 0) {
      float* t = dst + full * stride;
      _mm256_store_ps(t, LoadTail(w.data, w.dtype, a + 8 * full, tail));
      _mm256_store_ps(t + 8,
                      has_b ? LoadTail(w.data, w.dtype, b + 8 * full, tail) : _mm256_setzero_ps());
    }
  }
}

void PackPanel(const WeightRef& w, int64_t c0, int64_t cols, int pairs, float* out) {
  switch (w.dtype) {
    case DType::kF32:
      return PackPanelAs<DType::kF32>(w, c0, cols, pairs, out);
    case DType::kBF16:
      return PackPanelAs<DType::kBF16>(w, c0, cols, pairs, out);
    case DType::kF16:
      return PackPanelAs<DType::kF16>(w, c0, cols, pairs, out);
    case DType::kF8E4M3:  // quantized: never reaches the dense kernels
    case DType::kU8:      // a file dtype only (dtype.h)
      return;
  }
}

// The next panel's weights (contiguous rows), fetched into L2 a few lines per
// k step while the tiles of this panel compute, so that small-m products
// overlap the DRAM reads with the FMAs instead of packing from cold memory.
struct Prefetch {
  const char* next = nullptr;
  const char* end = nullptr;
  int64_t per_step = 0;  // cache lines per k step
};

// Rows [r0, r0 + R) x columns [c0, c0 + cols) over a panel packed for C pairs.
template <int R, int C>
void Tile(const MatmulParams& p, int64_t r0, int64_t c0, int64_t cols, const float* panel,
          Prefetch* pf) {
  const int64_t k = p.w.cols, full = k / 8, tail = k % 8;
  constexpr int64_t kStride = int64_t{C} * kPairFloats;
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const float* x[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) x[r] = XRow(p, r0 + r);
  const float* ws = panel;
  const char* pf_next = pf->next;
  for (int64_t s = 0; s < full; ++s, ws += kStride) {
    if (pf_next < pf->end) {
      for (int64_t i = 0; i < pf->per_step; ++i, pf_next += 64) _mm_prefetch(pf_next, _MM_HINT_T1);
    }
    __m512 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = _mm512_broadcast_f32x8(_mm256_loadu_ps(x[r] + 8 * s));
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 wv = _mm512_load_ps(ws + c * kPairFloats);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  pf->next = pf_next;
  if (tail > 0) {
    const __mmask8 mask = static_cast<__mmask8>((1u << tail) - 1);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(mask, x[r] + 8 * full));
      for (int c = 0; c < C; ++c)
        acc[r][c] = _mm512_fmadd_ps(xv, _mm512_load_ps(ws + c * kPairFloats), acc[r][c]);
    }
  }
  StorePairTileSums<R, C>(p, r0, c0, cols, acc);
}

template <int R>
void TileAnyPairs(int pairs, const MatmulParams& p, int64_t r0, int64_t c0, int64_t cols,
                  const float* panel, Prefetch* pf) {
  switch (pairs) {
    case 6:
      return Tile<R, 6>(p, r0, c0, cols, panel, pf);
    case 5:
      return Tile<R, 5>(p, r0, c0, cols, panel, pf);
    case 4:
      return Tile<R, 4>(p, r0, c0, cols, panel, pf);
    case 3:
      return Tile<R, 3>(p, r0, c0, cols, panel, pf);
    case 2:
      return Tile<R, 2>(p, r0, c0, cols, panel, pf);
    default:
      return Tile<R, 1>(p, r0, c0, cols, panel, pf);
  }
}

// Rows [r0, r1) over one packed panel of `pairs` pairs (<= kTilePairs).
void RowsOverPanel(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t cols,
                   int pairs, const float* panel, Prefetch* pf) {
  int64_t r = r0;
  for (; r + kTileRows <= r1; r += kTileRows) TileAnyPairs<4>(pairs, p, r, c0, cols, panel, pf);
  switch (r1 - r) {
    case 3:
      return TileAnyPairs<3>(pairs, p, r, c0, cols, panel, pf);
    case 2:
      return TileAnyPairs<2>(pairs, p, r, c0, cols, panel, pf);
    case 1:
      return TileAnyPairs<1>(pairs, p, r, c0, cols, panel, pf);
    default:
      return;
  }
}

// ---- bf16 weights ----

constexpr int kBf16TileCols = 6;    // 4 x 6 accumulators + 4 x + 1 w = 29 zmm
// 8 tiles' columns, widened at once. Each panel pass re-reads the unit's
// rows of x (up to 256 rows, past L2), so wider panels read x less often:
// bf16 [1024, 2048] x 512 rows, 1 thread: 11.9-13.2 ms with 24 columns,
// 9.9-10.2 with 48, 10.4-11.3 with 96 (the 8-lane kernel's 24: 10.1-10.3).
constexpr int kBf16PanelCols = 48;
constexpr int64_t kBf16BlockFloats = kBf16Block;  // a column's 16 even + 16 odd, one block

inline __m512 Bf16EvenZ(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
inline __m512 Bf16OddZ(__m512i v) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// 32 bf16 weights at p (the first `n` of them, the rest zeros).
inline __m512i LoadBf16Block(const uint16_t* p, int64_t n) {
  if (n >= kBf16Block) return _mm512_loadu_si512(p);
  return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << n) - 1), p);
}

// Decode: rows [r0, r0 + R) x columns [c0, c0 + C) straight from the weights,
// prefetching the next tile's rows (matmul_avx2.cc's Tile says why).
template <int R, int C>
void DecodeTileBf16(const MatmulParams& p, const float* xp, int64_t kp, int64_t r0, int64_t c0) {
  const int64_t k = p.w.cols;
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const uint16_t* w[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) w[c] = static_cast<const uint16_t*>(p.w.data) + (c0 + c) * k;
  // The next tile's row c is C rows after row c (past the last tile: this
  // tile's own rows again, harmless, and no branch in the loop).
  const int64_t ahead = c0 + 2 * C <= p.w.rows ? int64_t{C} * k * 2 : 0;
  auto block = [&](int64_t kk, auto load) {
    __m512 xe[R], xo[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      xe[r] = _mm512_load_ps(xp + r * kp + kk);
      xo[r] = _mm512_load_ps(xp + r * kp + kk + 16);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512i v = load(w[c] + kk);
      const __m512 e = Bf16EvenZ(v), o = Bf16OddZ(v);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[r][c] = _mm512_fmadd_ps(xe[r], e, acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(xo[r], o, acc[r][c]);
      }
    }
  };
  const int64_t full = k / kBf16Block * kBf16Block;
  for (int64_t kk = 0; kk < full; kk += kBf16Block) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      _mm_prefetch(reinterpret_cast<const char*>(w[c] + kk) + ahead, _MM_HINT_T1);
    block(kk, [](const uint16_t* q) { return _mm512_loadu_si512(q); });
  }
  if (full < k) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (k - full)) - 1);
    block(full, [mask](const uint16_t* q) { return _mm512_maskz_loadu_epi16(mask, q); });
  }
  StoreTileSums<R, C>(p, r0, c0, acc);
}

template <int R, int C>
void DecodeRowsBf16(const MatmulParams& p, const float* xp, int64_t kp, int64_t r0, int64_t c0,
                    int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) DecodeTileBf16<R, C>(p, xp, kp, r0, c);
  for (; c < c1; ++c) DecodeTileBf16<R, 1>(p, xp, kp, r0, c);
}

// Widens columns [c0, c0 + cols) into the layout above (block stride
// cols * 64 floats), prefetching the next column's row one column ahead.
void PackBf16(const WeightRef& w, int64_t c0, int64_t cols, float* out) {
  const int64_t k = w.cols, blocks = (k + kBf16Block - 1) / kBf16Block;
  const int64_t stride = cols * kBf16BlockFloats;
  const uint16_t* data = static_cast<const uint16_t*>(w.data);
  for (int64_t j = 0; j < cols; ++j) {
    const uint16_t* row = data + (c0 + j) * k;
    const char* next = reinterpret_cast<const char*>(row + k);
    const bool prefetch = c0 + j + 1 < w.rows;
    float* dst = out + j * kBf16BlockFloats;
    for (int64_t b = 0; b < blocks; ++b) {
      if (prefetch) _mm_prefetch(next + b * 64, _MM_HINT_T1);
      const __m512i v = LoadBf16Block(row + b * kBf16Block, k - b * kBf16Block);
      _mm512_store_ps(dst + b * stride, Bf16EvenZ(v));
      _mm512_store_ps(dst + b * stride + 16, Bf16OddZ(v));
    }
  }
}

// Rows [r0, r0 + R) x columns [c0, c0 + C) over a panel packed for C columns.
template <int R, int C>
void TileBf16(const MatmulParams& p, const float* xp, int64_t kp, int64_t r0, int64_t c0,
              const float* panel, Prefetch* pf) {
  const int64_t blocks = kp / kBf16Block;
  constexpr int64_t kStride = int64_t{C} * kBf16BlockFloats;
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const float* ws = panel;
  const char* pf_next = pf->next;
  for (int64_t b = 0; b < blocks; ++b, ws += kStride) {
    if (pf_next < pf->end) {
      for (int64_t i = 0; i < pf->per_step; ++i, pf_next += 64) _mm_prefetch(pf_next, _MM_HINT_T1);
    }
    const float* xb = xp + b * kBf16Block;
    __m512 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = _mm512_load_ps(xb + r * kp);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 wv = _mm512_load_ps(ws + c * kBf16BlockFloats);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = _mm512_load_ps(xb + r * kp + 16);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 wv = _mm512_load_ps(ws + c * kBf16BlockFloats + 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  pf->next = pf_next;
  StoreTileSums<R, C>(p, r0, c0, acc);
}

template <int R>
void TileBf16AnyCols(int cols, const MatmulParams& p, const float* xp, int64_t kp, int64_t r0,
                     int64_t c0, const float* panel, Prefetch* pf) {
  switch (cols) {
    case 6:
      return TileBf16<R, 6>(p, xp, kp, r0, c0, panel, pf);
    case 5:
      return TileBf16<R, 5>(p, xp, kp, r0, c0, panel, pf);
    case 4:
      return TileBf16<R, 4>(p, xp, kp, r0, c0, panel, pf);
    case 3:
      return TileBf16<R, 3>(p, xp, kp, r0, c0, panel, pf);
    case 2:
      return TileBf16<R, 2>(p, xp, kp, r0, c0, panel, pf);
    default:
      return TileBf16<R, 1>(p, xp, kp, r0, c0, panel, pf);
  }
}

// Rows [r0, r1) over one packed sub-panel of `cols` (<= kBf16TileCols)
// columns; xp: row r0's permuted x.
void RowsOverPanelBf16(const MatmulParams& p, const float* xp, int64_t kp, int64_t r0, int64_t r1,
                       int64_t c0, int cols, const float* panel, Prefetch* pf) {
  int64_t r = r0;
  for (; r + kTileRows <= r1; r += kTileRows)
    TileBf16AnyCols<4>(cols, p, xp + (r - r0) * kp, kp, r, c0, panel, pf);
  switch (r1 - r) {
    case 3:
      return TileBf16AnyCols<3>(cols, p, xp + (r - r0) * kp, kp, r, c0, panel, pf);
    case 2:
      return TileBf16AnyCols<2>(cols, p, xp + (r - r0) * kp, kp, r, c0, panel, pf);
    case 1:
      return TileBf16AnyCols<1>(cols, p, xp + (r - r0) * kp, kp, r, c0, panel, pf);
    default:
      return;
  }
}

void UnitBf16(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  int64_t kp = 0;
  const float* xp = PermuteBf16Rows(p, r0, r1, &kp);
  if (r1 - r0 < kDenseAvx512MinRows) {
    // Few weight rows streamed at once: on the OLMoE-shaped GEMV ([1024,
    // 2048], cold), 1 row x 2 columns ran 1.1-1.2x the read floor on 1 thread
    // where 1 x 4 ran 1.2-1.4x and 1 x 8 1.4-1.6x (and 2x on 2 threads): noisy,
    // shared-machine runs, but the order held in most of them.
    switch (r1 - r0) {
      case 3:
        return DecodeRowsBf16<3, 4>(p, xp, kp, r0, c0, c1);
      case 2:
        return DecodeRowsBf16<2, 4>(p, xp, kp, r0, c0, c1);
      default:
        return DecodeRowsBf16<1, 2>(p, xp, kp, r0, c0, c1);
    }
  }
  const int64_t blocks = kp / kBf16Block;
  thread_local std::vector<float> buffer;
  const size_t want = static_cast<size_t>(blocks) * kBf16PanelCols * kBf16BlockFloats + 16;
  if (buffer.size() < want) buffer.resize(want);
  float* panel = buffer.data();
  panel += (16 - (reinterpret_cast<uintptr_t>(panel) / sizeof(float)) % 16) % 16;
  const int64_t bytes = p.w.cols * 2;
  for (int64_t pc = c0; pc < c1; pc += kBf16PanelCols) {
    const int64_t panel_cols = std::min<int64_t>(kBf16PanelCols, c1 - pc);
    // Sub-panels of up to kBf16TileCols columns, each packed with its own
    // stride.
    for (int64_t sc = 0; sc < panel_cols; sc += kBf16TileCols) {
      const int64_t cols = std::min<int64_t>(kBf16TileCols, panel_cols - sc);
      PackBf16(p.w, pc + sc, cols, panel + sc * kBf16BlockFloats * blocks);
    }
    // The next panel fetched into L2 during the tiles, only for long row
    // groups: with few rows the tiles are short and the prefetches stall them
    // (bf16 [1024, 2048], 1 thread: 16 rows 583-597 us with it, 495-499
    // without; 64 rows 1474-1523 / 1394-1402; 512 rows 10.0-10.6 ms / 10.2-10.5).
    Prefetch pf;
    if (r1 - r0 > 64 && pc + kBf16PanelCols < c1) {
      const int64_t next_cols = std::min<int64_t>(kBf16PanelCols, c1 - pc - kBf16PanelCols);
      pf.next = static_cast<const char*>(p.w.data) + (pc + kBf16PanelCols) * bytes;
      pf.end = pf.next + next_cols * bytes;
      const int64_t tiles = (r1 - r0 + kTileRows - 1) / kTileRows *
                            ((panel_cols + kBf16TileCols - 1) / kBf16TileCols);
      const int64_t lines = (pf.end - pf.next + 63) / 64;
      pf.per_step =
          (lines + tiles * (blocks - 1) - 1) / std::max<int64_t>(1, tiles * (blocks - 1));
    }
    for (int64_t r = r0; r < r1; r += kTileRows) {
      const int64_t re = std::min(r1, r + kTileRows);
      for (int64_t sc = 0; sc < panel_cols; sc += kBf16TileCols) {
        const int cols = static_cast<int>(std::min<int64_t>(kBf16TileCols, panel_cols - sc));
        RowsOverPanelBf16(p, xp + (r - r0) * kp, kp, r, re, pc + sc, cols,
                          panel + sc * kBf16BlockFloats * blocks, &pf);
      }
    }
  }
}

}  // namespace

void DenseMatmulUnitAvx512(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (p.w.dtype == DType::kBF16) return UnitBf16(p, r0, r1, c0, c1);
  const int64_t steps = (p.w.cols + 7) / 8;
  // One panel: kPanelPairs pairs x steps x 16 floats, 64-byte aligned
  // (std::vector<__m512> is not: its allocator ignores the type's alignment).
  thread_local std::vector<float> buffer;
  const size_t want = static_cast<size_t>(steps) * kPanelPairs * kPairFloats + kPairFloats;
  if (buffer.size() < want) buffer.resize(want);
  float* panel = buffer.data();
  panel += (kPairFloats - (reinterpret_cast<uintptr_t>(panel) / sizeof(float)) % kPairFloats) %
           kPairFloats;
  for (int64_t pc = c0; pc < c1; pc += 2 * kPanelPairs) {
    const int64_t panel_cols = std::min<int64_t>(2 * kPanelPairs, c1 - pc);
    // Sub-panels of up to kTilePairs pairs, each packed with its own stride.
    for (int64_t sc = 0; sc < panel_cols; sc += 2 * kTilePairs) {
      const int64_t cols = std::min<int64_t>(2 * kTilePairs, panel_cols - sc);
      PackPanel(p.w, pc + sc, cols, static_cast<int>((cols + 1) / 2),
                panel + sc / 2 * kPairFloats * steps);
    }
    Prefetch pf;
    if (pc + 2 * kPanelPairs < c1) {
      const int64_t bytes = p.w.cols * static_cast<int64_t>(models::DTypeSize(p.w.dtype));
      const int64_t next_cols = std::min<int64_t>(2 * kPanelPairs, c1 - pc - 2 * kPanelPairs);
      pf.next = static_cast<const char*>(p.w.data) + (pc + 2 * kPanelPairs) * bytes;
      pf.end = pf.next + next_cols * bytes;
      const int64_t tiles = (r1 - r0 + kTileRows - 1) / kTileRows *
                            ((panel_cols + 2 * kTilePairs - 1) / (2 * kTilePairs));
      const int64_t lines = (pf.end - pf.next + 63) / 64;
      pf.per_step = (lines + tiles * (steps - 1) - 1) / std::max<int64_t>(1, tiles * (steps - 1));
    }
    for (int64_t r = r0; r < r1; r += kTileRows) {
      const int64_t re = std::min(r1, r + kTileRows);
      for (int64_t sc = 0; sc < panel_cols; sc += 2 * kTilePairs) {
        const int64_t cols = std::min<int64_t>(2 * kTilePairs, panel_cols - sc);
        RowsOverPanel(p, r, re, pc + sc, cols, static_cast<int>((cols + 1) / 2),
                      panel + sc / 2 * kPairFloats * steps, &pf);
      }
    }
  }
}

}  // namespace expertd::engine::cpu::internal

#pragma GCC pop_options
