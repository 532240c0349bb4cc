// The bf16-activation dense matmul (matmul_dense.h, MatmulActivations::kBF16)
// on AVX-512-BF16: x rounded to bf16 once per unit, then one vdpbf16ps per 32
// weights and row, the weights read straight from memory (no widening pack:
// bf16 pairs are what the instruction takes).
//
// Element (r, c) is always one 16-lane accumulator over the 32-blocks of k
// (the tail zero-padded), lane j fed the block's pair (2j, 2j + 1) by one
// vdpbf16ps, then reduced as the fp32-activation bf16 sequence is (lanes j and
// j + 8 added, HorizontalSum). Every tile shape and every split therefore
// gives the same bits (batch invariance), for decode (m < 4) as for prefill.
// On the CPUs measured, vdpbf16ps is acc = fma(x[2j+1], w[2j+1], acc) then
// fma(x[2j], w[2j], acc) (bf16 products are exact in fp32), inputs and
// outputs below FLT_MIN flushed to zero: reference_ops.h's
// DenseDotBf16Activations.
//
// Tiles: R <= 3 rows x C <= 8 columns, one zmm accumulator each (24), the R
// x blocks loaded once per block and each column's 64-byte weight block once
// per R dot products; a row's sums are reduced together (row_sums_avx512.h).
// Prefill runs columns outer, rows inner, so a tile's weights (C x k x 2
// bytes: 32 KiB at k = 2048) stay in L1 while the row tiles pass; decode (m < 4) is one row tile
// per column tile, the next tile's weights prefetched as the fp32-activation decode tiles do.
//
// Compiled for AVX-512-BF16 below the pragma, called only after
// CpuSupportsBf16Dot() (cpu_features.h).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/matmul_rows.h"
#include "engine/backend/cpu/row_sums_avx512.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu::internal {
namespace {

// Baseline code (before the target pragma): the std::vector instantiation
// must not be compiled for AVX-512.
int64_t RoundedStride(int64_t k) { return (k + kBf16Block - 1) / kBf16Block * kBf16Block; }

// This thread's buffer of rows x stride bf16 values, 64-byte aligned.
uint16_t* AlignedRows(int64_t rows, int64_t stride) {
  thread_local std::vector<uint16_t> buffer;
  const size_t want = static_cast<size_t>(rows * stride + 32);
  if (buffer.size() < want) buffer.resize(want);
  uint16_t* out = buffer.data();
  return out + (32 - (reinterpret_cast<uintptr_t>(out) / sizeof(uint16_t)) % 32) % 32;
}

}  // namespace
}  // namespace expertd::engine::cpu::internal

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")

namespace expertd::engine::cpu::internal {
namespace {

constexpr int kMaxTileRows = 4;
constexpr int kTileCols = 6;  // 4 x 6 accumulators + 4 x + 1 w = 29 zmm

}  // namespace

void RoundRowsToBf16(const MatmulParams& p, int64_t r0, int64_t r1, int64_t kp, uint16_t* out) {
  const int64_t k = p.w.cols;
  const int64_t full = k / kBf16Block * kBf16Block;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = XRow(p, r);
    uint16_t* o = out + (r - r0) * kp;
    for (int64_t kk = 0; kk < full; kk += kBf16Block) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + kk + 16), _mm512_loadu_ps(x + kk));
      _mm512_store_si512(o + kk, reinterpret_cast<const __m512i&>(v));
    }
    if (full < k) {
      const int64_t n = k - full;
      const __mmask16 lo = static_cast<__mmask16>((1u << std::min<int64_t>(n, 16)) - 1);
      const __mmask16 hi = static_cast<__mmask16>(n > 16 ? (1u << (n - 16)) - 1 : 0);
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + full + 16),
                                             _mm512_maskz_loadu_ps(lo, x + full));
      _mm512_store_si512(o + full, reinterpret_cast<const __m512i&>(v));
    }
  }
}

namespace {

// Rows [r0, r0 + R) x columns [c0, c0 + C). xb: row r0's bf16 x (stride kp).
// `ahead` (bytes, 0 for none): prefetch that far past each column's weights,
// i.e. the next tile's rows.
template <int R, int C>
void Tile(const MatmulParams& p, const uint16_t* xb, int64_t kp, int64_t r0, int64_t c0,
          int64_t ahead) {
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
  auto block = [&](int64_t kk, auto load) {
    __m512bh xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = (__m512bh)_mm512_load_si512(xb + r * kp + kk);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512bh v = (__m512bh)load(w[c] + kk);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], v);
    }
  };
  const int64_t full = k / kBf16Block * kBf16Block;
  if (ahead != 0) {
    for (int64_t kk = 0; kk < full; kk += kBf16Block) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(w[c] + kk) + ahead, _MM_HINT_T1);
      block(kk, [](const uint16_t* q) { return _mm512_loadu_si512(q); });
    }
  } else {
    for (int64_t kk = 0; kk < full; kk += kBf16Block)
      block(kk, [](const uint16_t* q) { return _mm512_loadu_si512(q); });
  }
  if (full < k) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (k - full)) - 1);
    block(full, [mask](const uint16_t* q) { return _mm512_maskz_loadu_epi16(mask, q); });
  }
  StoreTileSums<R, C>(p, r0, c0, acc);
}

template <int R>
void TileAnyCols(int cols, const MatmulParams& p, const uint16_t* xb, int64_t kp, int64_t r0,
                 int64_t c0, int64_t ahead) {
  switch (cols) {
    case 6:
      return Tile<R, 6>(p, xb, kp, r0, c0, ahead);
    case 5:
      return Tile<R, 5>(p, xb, kp, r0, c0, ahead);
    case 4:
      return Tile<R, 4>(p, xb, kp, r0, c0, ahead);
    case 3:
      return Tile<R, 3>(p, xb, kp, r0, c0, ahead);
    case 2:
      return Tile<R, 2>(p, xb, kp, r0, c0, ahead);
    case 1:
      return Tile<R, 1>(p, xb, kp, r0, c0, ahead);
    default:
      return;
  }
}

void TileAny(int rows, int cols, const MatmulParams& p, const uint16_t* xb, int64_t kp, int64_t r0,
             int64_t c0, int64_t ahead) {
  switch (rows) {
    case 4:
      return TileAnyCols<4>(cols, p, xb, kp, r0, c0, ahead);
    case 3:
      return TileAnyCols<3>(cols, p, xb, kp, r0, c0, ahead);
    case 2:
      return TileAnyCols<2>(cols, p, xb, kp, r0, c0, ahead);
    case 1:
      return TileAnyCols<1>(cols, p, xb, kp, r0, c0, ahead);
    default:
      return;
  }
}

}  // namespace

void DenseMatmulUnitAvx512Bf16(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0,
                               int64_t c1) {
  const int64_t kp = RoundedStride(p.w.cols);
  uint16_t* xb = AlignedRows(r1 - r0, kp);
  RoundRowsToBf16(p, r0, r1, kp, xb);
  const int64_t row_bytes = p.w.cols * 2;
  for (int64_t c = c0; c < c1; c += kTileCols) {
    const int cols = static_cast<int>(std::min<int64_t>(kTileCols, c1 - c));
    // The next column tile's weights, fetched while the first row tile runs
    // (past the unit's last tile: none).
    const int64_t ahead = c + kTileCols < c1 ? int64_t{kTileCols} * row_bytes : 0;
    for (int64_t r = r0; r < r1; r += kMaxTileRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kMaxTileRows, r1 - r));
      TileAny(rows, cols, p, xb + (r - r0) * kp, kp, r, c, r == r0 ? ahead : 0);
    }
  }
}

}  // namespace expertd::engine::cpu::internal

#pragma GCC pop_options
