// The dense GEMM/GEMV kernels on AVX2: one (row group, column chunk) unit of
// y[m, n] (+)= x[m, k] . w[n, k]^T + bias with fp32, fp16 or bf16 weights
// (matmul.cc splits the product into units and picks the kernel).
//
// Register tiles of R rows x C columns share each weight load between rows
// (and each activation load between columns). Whatever R and C, element
// (r, c) is computed by the same sequence, the one matmul_dense.h documents
// for the weights' dtype (fp32 / fp16: one 8-lane accumulator, FMA over k in
// steps of 8, a zero-padded tail last, HorizontalSum, + bias, (+ y); bf16:
// a 16-lane accumulator fed the even then the odd elements of each 32-block).
// So a row's result is bitwise independent of m, of its position in the tile
// and of the thread split.
//
// fp32 / fp16 weights: 8 elements per load (fp16 via F16C), then FMA. bf16:
// 16 weights per 32-byte load, the even ones u32 << 16 and the odd ones
// u32 & 0xFFFF0000 (exact), FMA'd against x permuted once per row into the
// same order; the 16-lane accumulator is two ymm registers. Decode (m = 1)
// uses 1 x 8 tiles (bf16: 1 x 4, i.e. 8 accumulators): independent FMA chains
// streaming several weight rows, which keeps a core memory-bound.
//
// This file is the AVX2 variant; with m >= 4 rows (bf16: any m) on an AVX-512
// CPU the kernels of matmul_avx512.cc run instead (bitwise the same results:
// matmul_dense.h).
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/matmul_rows.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu {
namespace {

struct F32W {
  static constexpr int kBytes = 4;
  static __m256 Load8(const void* w, int64_t i) {
    return LoadF32x8(static_cast<const float*>(w) + i);
  }
};
struct F16W {
  static constexpr int kBytes = 2;
  static __m256 Load8(const void* w, int64_t i) {
    return LoadF16x8(static_cast<const uint16_t*>(w) + i);
  }
};

template <typename W, int R, int C>
inline void Tile(const MatmulParams& p, int64_t k, int64_t r0, int64_t c0, float out[R][C]) {
  __m256 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  const float* x[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) x[r] = XRow(p, r0 + r);
  const void* w = p.w.data;
  // Rows of C weights are streamed at once; each row is its own page-sized
  // stream, which hardware prefetchers restart cold. So prefetch the NEXT
  // tile's rows at the same offset, one cache line per row per 64 bytes.
  // Measured on the OLMoE-shaped bf16 decode (weights cold in DRAM), 1
  // thread: 27.7 ms/token with whole-row prefetch, 39.4 ms prefetching only
  // each row's first KiB, 46.6 ms without. (On weights already in cache it
  // costs up to ~30%, which only small models see.) Into L2 (T1), here and
  // in every kernel's next-tile prefetch: a T0 prefetch holds one of L1's
  // few miss buffers until its line arrives, and a narrow decode tile
  // issuing them for a whole row ran out of buffers and stalled its own
  // loads (bf16 GEMV, 1 thread: 314-345 us a call with T0, 185-198 with
  // T1, the read floor of its bytes 184-191; docs/benchmarks.md).
  const char* next = static_cast<const char*>(w) + (c0 + C) * k * W::kBytes;
  const bool prefetch = c0 + 2 * C <= p.w.rows;
  constexpr int64_t kLineElems = 64 / W::kBytes;
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    if (prefetch && (kk & (kLineElems - 1)) == 0) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) _mm_prefetch(next + (c * k + kk) * W::kBytes, _MM_HINT_T1);
    }
    __m256 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = LoadF32x8(x[r] + kk);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      __m256 wv = W::Load8(w, (c0 + c) * k + kk);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (kk < k) {
    const int64_t tail = k - kk;
    for (int c = 0; c < C; ++c) {
      __m256 wv = LoadTail(w, p.w.dtype, (c0 + c) * k + kk, tail);
      for (int r = 0; r < R; ++r)
        acc[r][c] = _mm256_fmadd_ps(LoadTailF32(x[r] + kk, tail), wv, acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) out[r][c] = HorizontalSum(acc[r][c]);
  }
}

// Finishes and stores one tile's results: + bias, (* row weight), (+ y).
template <int R, int C>
inline void Store(const MatmulParams& p, int64_t r0, int64_t c0, const float out[R][C]) {
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) StoreElement(p, r0 + r, c0 + c, out[r][c]);
  }
}

// Rows [r0, r0 + R) x columns [c0, c1): full C-wide tiles, then 1-wide ones.
template <typename W, int R, int C>
void RowBlock(const MatmulParams& p, int64_t k, int64_t r0, int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) {
    float out[R][C];
    Tile<W, R, C>(p, k, r0, c, out);
    Store<R, C>(p, r0, c, out);
  }
  for (; c < c1; ++c) {
    float out[R][1];
    Tile<W, R, 1>(p, k, r0, c, out);
    Store<R, 1>(p, r0, c, out);
  }
}

// Rows [r0, r1) x columns [c0, c1), in column panels so a panel's weights
// stay in cache while every row block passes over them.
template <typename W>
void Unit(const MatmulParams& p, int64_t k, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  constexpr int64_t kPanel = 32;
  for (int64_t pc = c0; pc < c1; pc += kPanel) {
    const int64_t pe = std::min(c1, pc + kPanel);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) RowBlock<W, 4, 2>(p, k, r, pc, pe);
    switch (r1 - r) {
      case 3:
        RowBlock<W, 3, 3>(p, k, r, pc, pe);
        break;
      case 2:
        RowBlock<W, 2, 4>(p, k, r, pc, pe);
        break;
      case 1:
        RowBlock<W, 1, 8>(p, k, r, pc, pe);
        break;
      default:
        break;
    }
  }
}

// bf16 weights (matmul_dense.h's bf16 sequence). From 16 consecutive bf16
// weights w[kk, kk + 16) as 8 u32: the even ones w[kk + 2j] (u32 << 16) and
// the odd ones w[kk + 2j + 1] (u32 & 0xFFFF0000), j < 8, exact.
inline __m256 Bf16Even(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
inline __m256 Bf16Odd(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// Rows [r0, r0 + R) x columns [c0, c0 + C); xp: the rows permuted
// (PermuteBf16X), row r at xp + r * kp. Accumulator lanes 0-7 of element
// (r, c) are lo[r][c], lanes 8-15 hi[r][c].
template <int R, int C>
inline void TileBf16(const MatmulParams& p, int64_t k, const float* xp, int64_t kp, int64_t c0,
                     float out[R][C]) {
  __m256 lo[R][C], hi[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
  }
  const uint16_t* w[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) w[c] = static_cast<const uint16_t*>(p.w.data) + (c0 + c) * k;
  // The next tile's row c, one cache line per 32-block (Tile's reason); past
  // the last tile this tile's own rows (harmless, no branch in the loop).
  const int64_t ahead = c0 + 2 * C <= p.w.rows ? int64_t{C} * k * 2 : 0;
  // One 32-block: w16[c] holds column c's 32 weights.
  auto block = [&](const uint16_t* const* w16, const float* xb) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w16[c]));
      const __m256 e0 = Bf16Even(v0), o0 = Bf16Odd(v0);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        lo[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + r * kp), e0, lo[r][c]);
        lo[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + r * kp + 16), o0, lo[r][c]);
      }
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w16[c] + 16));
      const __m256 e1 = Bf16Even(v1), o1 = Bf16Odd(v1);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        hi[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + r * kp + 8), e1, hi[r][c]);
        hi[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(xb + r * kp + 24), o1, hi[r][c]);
      }
    }
  };
  const int64_t full = k / kBf16Block * kBf16Block;
  for (int64_t kk = 0; kk < full; kk += kBf16Block) {
    const uint16_t* w16[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      w16[c] = w[c] + kk;
      _mm_prefetch(reinterpret_cast<const char*>(w16[c]) + ahead, _MM_HINT_T1);
    }
    block(w16, xp + kk);
  }
  if (full < k) {  // the tail, zero-padded to a block (x is, by PermuteBf16X)
    alignas(32) uint16_t buf[C][kBf16Block] = {};
    const uint16_t* w16[C];
    for (int c = 0; c < C; ++c) {
      std::memcpy(buf[c], w[c] + full, (k - full) * sizeof(uint16_t));
      w16[c] = buf[c];
    }
    block(w16, xp + full);
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) out[r][c] = HorizontalSum(_mm256_add_ps(lo[r][c], hi[r][c]));
  }
}

// Rows [r0, r0 + R) x columns [c0, c1), xp their permuted rows.
template <int R, int C>
void RowBlockBf16(const MatmulParams& p, int64_t k, const float* xp, int64_t kp, int64_t r0,
                  int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) {
    float out[R][C];
    TileBf16<R, C>(p, k, xp, kp, c, out);
    Store<R, C>(p, r0, c, out);
  }
  for (; c < c1; ++c) {
    float out[R][1];
    TileBf16<R, 1>(p, k, xp, kp, c, out);
    Store<R, 1>(p, r0, c, out);
  }
}

// Unit for bf16: x permuted once, then column panels as Unit. Tiles keep at
// most 12 ymm accumulators (AVX2 has 16 registers).
void UnitBf16(const MatmulParams& p, int64_t k, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  int64_t kp = 0;
  const float* xp = internal::PermuteBf16Rows(p, r0, r1, &kp);
  constexpr int64_t kPanel = 32;
  for (int64_t pc = c0; pc < c1; pc += kPanel) {
    const int64_t pe = std::min(c1, pc + kPanel);
    int64_t r = r0;
    for (; r + 3 <= r1; r += 3) RowBlockBf16<3, 2>(p, k, xp + (r - r0) * kp, kp, r, pc, pe);
    switch (r1 - r) {
      case 2:
        RowBlockBf16<2, 2>(p, k, xp + (r - r0) * kp, kp, r, pc, pe);
        break;
      case 1:
        RowBlockBf16<1, 4>(p, k, xp + (r - r0) * kp, kp, r, pc, pe);
        break;
      default:
        break;
    }
  }
}

}  // namespace

namespace internal {

const float* PermuteBf16Rows(const MatmulParams& p, int64_t r0, int64_t r1, int64_t* stride) {
  const int64_t k = p.w.cols, kp = (k + kBf16Block - 1) / kBf16Block * kBf16Block;
  thread_local std::vector<float> buffer;
  const size_t want = static_cast<size_t>((r1 - r0) * kp + 16);
  if (buffer.size() < want) buffer.resize(want);
  float* out = buffer.data();
  out += (16 - (reinterpret_cast<uintptr_t>(out) / sizeof(float)) % 16) % 16;
  for (int64_t r = r0; r < r1; ++r) PermuteBf16X(XRow(p, r), k, out + (r - r0) * kp);
  *stride = kp;
  return out;
}

void DenseMatmulUnitAvx2(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t k = p.w.cols;
  switch (p.w.dtype) {
    case DType::kF32:
      return Unit<F32W>(p, k, r0, r1, c0, c1);
    case DType::kBF16:
      return UnitBf16(p, k, r0, r1, c0, c1);
    case DType::kF16:
      return Unit<F16W>(p, k, r0, r1, c0, c1);
    case DType::kF8E4M3:  // always quantized (kFp8E4m3Block): not dense
    case DType::kU8:      // a file dtype only (dtype.h)
      assert(false);
      return;
  }
}

}  // namespace internal
}  // namespace expertd::engine::cpu
