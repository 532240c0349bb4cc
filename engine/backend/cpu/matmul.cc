// y[m, n] (+)= x[m, k] . w[n, k]^T + bias: the CPU GEMM/GEMV.
//
// Register tiles of R rows x C columns share each weight load between rows
// (and each activation load between columns). Whatever R and C, element
// (r, c) is computed by the same sequence: one 8-lane accumulator, FMA over k
// in steps of 8 (a zero-padded tail last), HorizontalSum, + bias, (+ y). So a
// row's result is bitwise independent of m, of its position in the tile and
// of the thread split (threads take disjoint (row-group, column-chunk) units).
//
// bf16 weights: 8 x u16 -> zero-extend to u32 -> shift left 16 -> fp32 (exact),
// then FMA; fp16 via F16C. Decode (m = 1) uses 1 x 8 tiles: 8 independent
// FMA chains streaming 8 weight rows, which keeps a core memory-bound.
//
// This file is the AVX2 variant; with m >= 4 rows on an AVX-512 CPU the
// register-blocked kernel of matmul_avx512.cc runs instead (bitwise the same
// results: matmul_dense.h).
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/matmul_fp8.h"
#include "engine/backend/cpu/matmul_unit.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu {
namespace {

struct F32W {
  static constexpr int kBytes = 4;
  static __m256 Load8(const void* w, int64_t i) {
    return LoadF32x8(static_cast<const float*>(w) + i);
  }
};
struct Bf16W {
  static constexpr int kBytes = 2;
  static __m256 Load8(const void* w, int64_t i) {
    return LoadBf16x8(static_cast<const uint16_t*>(w) + i);
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
  for (int r = 0; r < R; ++r) x[r] = p.x + (r0 + r) * p.x_stride;
  const void* w = p.w.data;
  // Rows of C weights are streamed at once; each row is its own page-sized
  // stream, which hardware prefetchers restart cold. So prefetch the NEXT
  // tile's rows at the same offset, one cache line per row per 64 bytes.
  // Measured on the OLMoE-shaped bf16 decode (weights cold in DRAM), 1
  // thread: 27.7 ms/token with whole-row prefetch, 39.4 ms prefetching only
  // each row's first KiB, 46.6 ms without. (On weights already in cache it
  // costs up to ~30%, which only small models see.)
  const char* next = static_cast<const char*>(w) + (c0 + C) * k * W::kBytes;
  const bool prefetch = c0 + 2 * C <= p.w.rows;
  constexpr int64_t kLineElems = 64 / W::kBytes;
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    if (prefetch && (kk & (kLineElems - 1)) == 0) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) _mm_prefetch(next + (c * k + kk) * W::kBytes, _MM_HINT_T0);
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

// Finishes and stores one tile's results: + bias, (+ y).
template <int R, int C>
inline void Store(const MatmulParams& p, int64_t r0, int64_t c0, const float out[R][C]) {
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (r0 + r) * p.y_stride + c0;
    for (int c = 0; c < C; ++c) {
      float v = out[r][c];
      if (!p.bias.empty()) v = v + LoadScalar(p.bias.data, p.bias.dtype, c0 + c);
      y[c] = p.accumulate ? y[c] + v : v;
    }
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

using UnitFn = void (*)(const MatmulParams&, int64_t, int64_t, int64_t, int64_t);

// The product split into output units: groups of `row_group` rows x column
// chunks (multiples of `chunk_multiple`) small enough that every thread gets
// several (load balance). Units are disjoint, so the split changes no result.
void Run(const MatmulParams& p, ThreadPool* pool, UnitFn unit, int64_t row_group,
         int64_t chunk_multiple) {
  const int64_t m = p.m, n = p.w.rows, k = p.w.cols;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t kRowGroup = row_group;
  const int64_t row_groups = (m + kRowGroup - 1) / kRowGroup;
  int64_t chunk = n;
  if (threads > 1) {
    int64_t want = (n + threads * 4 - 1) / (threads * 4);
    chunk = std::max<int64_t>(16, (want + chunk_multiple - 1) / chunk_multiple * chunk_multiple);
  }
  const int64_t col_chunks = (n + chunk - 1) / chunk;
  const int64_t units = row_groups * col_chunks;
  // Tiny products are not worth waking threads for.
  const int64_t grain = m * n * k < (1 << 16) ? units : 1;
  ParallelFor(pool, units, grain, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t rg = u / col_chunks, cc = u % col_chunks;
      const int64_t r0 = rg * kRowGroup, r1 = std::min(m, r0 + kRowGroup);
      const int64_t c0 = cc * chunk, c1 = std::min(n, c0 + chunk);
      unit(p, r0, r1, c0, c1);
    }
  });
}

}  // namespace

namespace internal {

void DenseMatmulUnitAvx2(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t k = p.w.cols;
  switch (p.w.dtype) {
    case DType::kF32:
      return Unit<F32W>(p, k, r0, r1, c0, c1);
    case DType::kBF16:
      return Unit<Bf16W>(p, k, r0, r1, c0, c1);
    case DType::kF16:
      return Unit<F16W>(p, k, r0, r1, c0, c1);
    case DType::kF8E4M3:  // always quantized (kFp8E4m3Block): not dense
      assert(false);
      return;
  }
}

}  // namespace internal

CpuIsa DenseMatmulIsa(int64_t rows, CpuIsa isa) {
  if (isa == CpuIsa::kAvx512 && rows >= kDenseAvx512MinRows && CpuSupports(CpuIsa::kAvx512))
    return CpuIsa::kAvx512;
  return CpuIsa::kAvx2;
}

void DenseMatmul(const MatmulParams& p, ThreadPool* pool, CpuIsa isa) {
  if (p.m <= 0 || p.w.rows <= 0) return;
  if (DenseMatmulIsa(p.m, isa) == CpuIsa::kAvx512) {
    // Chunks of whole 12-column tiles (the AVX-512 kernel's 6 pairs); a
    // unit widens its weights once for all its rows, so groups are long.
    // (bf16, [1024, 2048] x 512 rows, 1 thread: 181 GFLOP/s with groups of
    // 64 rows, 195 with 256).
    return Run(p, pool, internal::DenseMatmulUnitAvx512, 256, 12);
  }
  Run(p, pool, internal::DenseMatmulUnitAvx2, 64, 8);
}

void MatmulUnit(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (r0 >= r1 || c0 >= c1) return;
  if (p.w.quant.quantized()) return QuantMatmulUnit(p, r0, r1, c0, c1);
  // Every dense variant is bitwise the same: pick by this unit's rows.
  if (DenseMatmulIsa(r1 - r0, BestCpuIsa()) == CpuIsa::kAvx512) {
    return internal::DenseMatmulUnitAvx512(p, r0, r1, c0, c1);
  }
  internal::DenseMatmulUnitAvx2(p, r0, r1, c0, c1);
}

void Matmul(const MatmulParams& p, ThreadPool* pool) {
  assert(p.x != nullptr && p.y != nullptr && p.w.data != nullptr);
  assert(p.x_stride >= p.w.cols && p.y_stride >= p.w.rows);
  assert(p.bias.empty() || p.bias.rows * p.bias.cols == p.w.rows);
  if (p.m <= 0 || p.w.rows <= 0) return;
  if (p.w.quant.quantized()) return QuantMatmul(p, pool);
  switch (p.w.dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16:
      return DenseMatmul(p, pool, BestCpuIsa());
    case DType::kF8E4M3:  // always with quant kFp8E4m3Block (asserted there)
      return MatmulFp8(p, pool, BestFp8Isa());
  }
}

}  // namespace expertd::engine::cpu
