// Block-scaled FP8 matmul: the AVX2 variant, run-time dispatch and threading.
// (See matmul_fp8.h for the arithmetic contract.)
#include "engine/backend/cpu/matmul_fp8.h"

#include <algorithm>
#include <cassert>

#include "engine/backend/cpu/simd.h"

namespace expertd::engine::cpu {
namespace internal {
namespace {

// Eight E4M3 codes -> eight fp32 values / 256 (exact), NaN codes -> NaN.
inline __m256 E4m3x8Over256(const uint8_t* codes) {
  const __m128i b = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const __m128i mag = _mm_and_si128(b, _mm_set1_epi16(0x7f));
  __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, _mm_set1_epi16(0x80)), 8),
                           _mm_slli_epi16(mag, 7));
  const __m128i nan = _mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f));
  h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7fff)));
  return _mm256_cvtph_ps(h);
}

// R rows x C weight rows, k streamed per scale block.
template <int R, int C>
void Tile(const MatmulParams& p, int64_t r0, int64_t c0) {
  const int64_t k = p.w.cols;
  const Fp8BlockGrid fs = Fp8GridOf(p.w.quant, p.w.cols);
  const auto* codes = static_cast<const uint8_t*>(p.w.data);
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const float* srow[C];
  for (int c = 0; c < C; ++c)
    srow[c] = fs.scale + ((fs.row0 + c0 + c) / fs.block_rows) * fs.scale_cols;
  const int64_t k8 = k / 8 * 8;
  // Prefetch the next tile's rows at the same offset (see matmul_avx2.cc: each
  // weight row is its own stream, which hardware prefetchers start cold).
  const uint8_t* next = codes + (c0 + C) * k;
  const bool prefetch = c0 + 2 * C <= p.w.rows;
  for (int64_t kb = 0; kb < k8; kb += fs.block_cols) {
    const int64_t kend = std::min(k8, kb + fs.block_cols);
    __m256 s[C];
    for (int c = 0; c < C; ++c) s[c] = _mm256_set1_ps(srow[c][kb / fs.block_cols] * 256.0f);
    for (int64_t kk = kb; kk < kend; kk += 8) {
      if (prefetch && (kk & 63) == 0) {
        for (int c = 0; c < C; ++c) _mm_prefetch(next + c * k + kk, _MM_HINT_T1);
      }
      __m256 xv[R];
      for (int r = 0; r < R; ++r) xv[r] = LoadF32x8(p.x + (r0 + r) * p.x_stride + kk);
      for (int c = 0; c < C; ++c) {
        const __m256 wv = _mm256_mul_ps(E4m3x8Over256(codes + (c0 + c) * k + kk), s[c]);
        for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
      }
    }
  }
  if (k8 < k) {  // the zero-padded tail, dequantized one element at a time
    for (int c = 0; c < C; ++c) {
      alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t j = k8; j < k; ++j) {
        buf[j - k8] = models::E4m3ToF32(codes[(c0 + c) * k + j]) * srow[c][j / fs.block_cols];
      }
      const __m256 wv = _mm256_load_ps(buf);
      for (int r = 0; r < R; ++r) {
        acc[r][c] =
            _mm256_fmadd_ps(LoadTailF32(p.x + (r0 + r) * p.x_stride + k8, k - k8), wv, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (r0 + r) * p.y_stride + c0;
    for (int c = 0; c < C; ++c) {
      float v = HorizontalSum(acc[r][c]);
      if (!p.bias.empty()) v = v + LoadScalar(p.bias.data, p.bias.dtype, c0 + c);
      y[c] = p.accumulate ? y[c] + v : v;
    }
  }
}

template <int R, int C>
void RowBlock(const MatmulParams& p, int64_t r0, int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) Tile<R, C>(p, r0, c);
  for (; c < c1; ++c) Tile<R, 1>(p, r0, c);
}

}  // namespace

void MatmulFp8UnitAvx2(const MatmulParams& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) RowBlock<4, 2>(p, r, c0, c1);
  for (; r < r1; ++r) RowBlock<1, 8>(p, r, c0, c1);
}

}  // namespace internal

Fp8Isa BestFp8Isa() {
  static const Fp8Isa isa = __builtin_cpu_supports("avx512f") &&
                                    __builtin_cpu_supports("avx512bw") &&
                                    __builtin_cpu_supports("avx512vl")
                                ? Fp8Isa::kAvx512
                                : Fp8Isa::kAvx2;
  return isa;
}

const char* Fp8IsaName(Fp8Isa isa) {
  switch (isa) {
    case Fp8Isa::kAvx2:
      return "avx2";
    case Fp8Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

void MatmulFp8(const MatmulParams& p, ThreadPool* pool, Fp8Isa isa) {
  assert(p.w.quant.format == WeightFormat::kFp8E4m3Block && p.w.quant.scales != nullptr);
  assert(p.w.quant.group_size > 0 && p.w.quant.group_size % 16 == 0 && p.w.quant.block_rows > 0);
  const int64_t m = p.m, n = p.w.rows, k = p.w.cols;
  if (m <= 0 || n <= 0) return;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  // Same unit split as the 16/32-bit matmul: row groups x column chunks.
  constexpr int64_t kRowGroup = 64;
  const int64_t row_groups = (m + kRowGroup - 1) / kRowGroup;
  int64_t chunk = n;
  if (threads > 1) {
    const int64_t want = (n + threads * 4 - 1) / (threads * 4);
    chunk = std::max<int64_t>(16, (want + 7) / 8 * 8);
  }
  const int64_t col_chunks = (n + chunk - 1) / chunk;
  const int64_t units = row_groups * col_chunks;
  const int64_t grain = m * n * k < (1 << 16) ? units : 1;
  auto unit = isa == Fp8Isa::kAvx512 ? internal::MatmulFp8UnitAvx512 : internal::MatmulFp8UnitAvx2;
  ParallelFor(pool, units, grain, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t rg = u / col_chunks, cc = u % col_chunks;
      const int64_t r0 = rg * kRowGroup, r1 = std::min(m, r0 + kRowGroup);
      const int64_t c0 = cc * chunk, c1 = std::min(n, c0 + chunk);
      unit(p, r0, r1, c0, c1);
    }
  });
}

}  // namespace expertd::engine::cpu
