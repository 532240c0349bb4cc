// The machine's arithmetic peaks per thread, measured in the same run as the
// kernels they are compared with (linked into quant_gemv_benchmark): FMA,
// vdpbf16ps and vpdpbusd chains in registers (AVX2's FMA and vpmaddubsw
// too), and the int8 panel tile's
// instruction mix without loads (the ceiling of that GEMM's design).
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/thread_pool.h"

namespace expertd::engine {
namespace {

// The machine's FMA peak per thread: 12 independent AVX-512 FMA chains in
// registers (2 flops x 16 lanes per FMA; unrolled, or GCC keeps them in
// memory). Args: {threads}.
__attribute__((target("avx512f"))) void FmaChains(int64_t iters, float* out) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(0.001f * j);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.0001f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  _mm512_storeu_ps(out, s);
}

// Runs `chains` (kIters steps of independent chains in registers) on every
// thread at once; flops_per_step: one step's flops. Skipped, naming what is
// missing, when the CPU lacks the instructions (`has` false).
void RunPeak(benchmark::State& state, bool has, const char* lacks, void (*chains)(int64_t, float*),
             double flops_per_step) {
  if (!has) {
    state.SkipWithError(lacks);
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  ThreadPool pool(threads);
  constexpr int64_t kIters = 1 << 16;
  std::vector<float> out(16 * threads);
  for (auto _ : state) {
    ParallelFor(&pool, threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) chains(kIters, out.data() + 16 * t);
    });
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = flops_per_step * kIters * threads;
  state.counters["GFLOPs"] =
      benchmark::Counter(flops * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["MFLOP"] = flops / 1e6;  // per iteration
}

void BM_FmaPeak(benchmark::State& state) {
  RunPeak(state, cpu::CpuSupports(cpu::CpuIsa::kAvx512), "the CPU lacks AVX-512", FmaChains,
          2.0 * 16 * 12);
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The AVX2 FMA peak per thread (the fp32-activation kernels on a CPU
// without AVX-512): 12 independent chains, 2 flops x 8 lanes per FMA.
void Avx2FmaChains(int64_t iters, float* out) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(0.001f * j);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.0001f);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  _mm256_storeu_ps(out, s);
}

void BM_Avx2FmaPeak(benchmark::State& state) {
  RunPeak(state, cpu::CpuSupports(cpu::CpuIsa::kAvx2), "the CPU lacks AVX2", Avx2FmaChains,
          2.0 * 8 * 12);
}
BENCHMARK(BM_Avx2FmaPeak)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The AVX2 int8 dot-product peak per thread, the int8-activation kernel's
// products without VNNI (quant_matmul_avx2_int8.cc): 6 independent chains
// of vpmaddubsw (32 u8 x s8 products into s16 pairs; each chain's bytes are
// its last result, so nothing can be hoisted), vpmaddwd against ones (into
// s32) and vpaddd: 64 "flops" (2 per product, as BM_GemmActivations counts)
// per chain step.
void Avx2Int8DotChains(int64_t iters, float* out) {
  __m256i x[6], acc[6];
  for (int j = 0; j < 6; ++j) {
    x[j] = _mm256_set1_epi8(static_cast<char>(j + 1));
    acc[j] = _mm256_set1_epi32(j);
  }
  const __m256i a = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 6
    for (int j = 0; j < 6; ++j) {
      const __m256i pairs = _mm256_maddubs_epi16(a, x[j]);
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(pairs, ones));
      x[j] = pairs;
    }
  }
  __m256i s = acc[0];
  for (int j = 1; j < 6; ++j) s = _mm256_add_epi32(s, acc[j]);
  _mm256_storeu_ps(out, _mm256_cvtepi32_ps(s));
}

void BM_Avx2Int8DotPeak(benchmark::State& state) {
  RunPeak(state, cpu::CpuSupports(cpu::CpuIsa::kAvx2), "the CPU lacks AVX2", Avx2Int8DotChains,
          64.0 * 6);
}
BENCHMARK(BM_Avx2Int8DotPeak)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The bf16 dot-product peak per thread: 12 independent vdpbf16ps chains
// (16 lanes x 2 products x 2 flops = 64 flops per instruction). Args: {threads}.
__attribute__((target("avx512f,avx512bf16"))) void Bf16DotChains(int64_t iters, float* out) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(0.001f * j);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.999f), _mm512_set1_ps(0.999f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.0001f), _mm512_set1_ps(0.0001f));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  _mm512_storeu_ps(out, s);
}

void BM_Bf16DotPeak(benchmark::State& state) {
  RunPeak(state, cpu::CpuSupportsBf16Dot(), "the CPU lacks AVX-512-BF16", Bf16DotChains,
          4.0 * 16 * 12);
}
BENCHMARK(BM_Bf16DotPeak)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The int8 dot-product peak per thread: 12 independent vpdpbusd chains
// (16 lanes x 4 products x 2 ops = 128 "flops" per instruction, the unit
// BM_GemmActivations counts in). Args: {threads}.
__attribute__((target("avx512f,avx512vnni"))) void Int8DotChains(int64_t iters, float* out) {
  __m512i acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  }
  __m512i s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, acc[j]);
  _mm512_storeu_ps(out, _mm512_cvtepi32_ps(s));
}

void BM_Int8DotPeak(benchmark::State& state) {
  RunPeak(state, cpu::CpuSupportsInt8Dot(), "the CPU lacks AVX-512-VNNI", Int8DotChains,
          8.0 * 16 * 12);
}
BENCHMARK(BM_Int8DotPeak)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The int8 panel tile's arithmetic without its loads (quant_matmul_avx512vnni.cc,
// Tile<4, 2>): a step is one 32-block of 4 rows x 32 columns, 8 vpdpbusd per
// 4 x's bytes into 8 integer sums, then per sum the block's epilogue (the
// sum converted, the column scales times the row's d, one FMA). The
// epilogue's fp32 work shares the vector units with vpdpbusd, so this rate
// bounds the int8 GEMM's below BM_Int8DotPeak; flops counted as
// BM_GemmActivations counts them (the products only). Args: {threads}.
__attribute__((target("avx512f,avx512vnni"))) void Int8TileChains(int64_t iters, float* out) {
  alignas(64) static const float kScales[8 * 16] = {0.5f, 0.25f, 0.125f, 1.0f};
  static const float kD[8] = {1e-3f, 2e-3f, 3e-3f, 4e-3f, 5e-3f, 6e-3f, 7e-3f, 8e-3f};
  static const int32_t kCorr[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
  __m512 acc[4][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i) {
    __m512i sum[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {  // distinct starts, or the compiler merges the chains
      sum[r][0] = _mm512_set1_epi32(kCorr[(i + r) & 7]);
      sum[r][1] = _mm512_set1_epi32(kCorr[(i + r + 4) & 7]);
    }
#pragma GCC unroll 8
    for (int step = 0; step < 8; ++step) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        sum[r][0] = _mm512_dpbusd_epi32(sum[r][0], a, b);
        sum[r][1] = _mm512_dpbusd_epi32(sum[r][1], a, b);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const __m512 d = _mm512_set1_ps(kD[(i + r) & 7]);
#pragma GCC unroll 2
      for (int c = 0; c < 2; ++c) {
        const __m512 scale = _mm512_mul_ps(_mm512_load_ps(kScales + ((i + c) & 7) * 16), d);
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[r][c]), scale, acc[r][c]);
      }
    }
  }
  __m512 s = _mm512_setzero_ps();
  for (auto& row : acc) s = _mm512_add_ps(s, _mm512_add_ps(row[0], row[1]));
  _mm512_storeu_ps(out, s);
}

void BM_Int8TilePeak(benchmark::State& state) {
  RunPeak(state, cpu::CpuSupportsInt8Dot(), "the CPU lacks AVX-512-VNNI", Int8TileChains,
          8.0 * 16 * 64);
}
BENCHMARK(BM_Int8TilePeak)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace expertd::engine
