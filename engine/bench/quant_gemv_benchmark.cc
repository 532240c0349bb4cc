// The quantized GEMV (decode, m = 1) per weight format and per kernel variant
// (scalar reference, AVX2, AVX-512 blocked, AVX-512 generic loop), on
// OLMoE-1B-7B's expert gate shape [1024, 2048], against the bf16 dense kernel
// on the same shape. The weights of at least 48 experts' gate matrices, and
// at least 128 MiB of them (4x the 32 MiB L3; 4-bit formats need ~110), are
// cycled through, so every call reads them from DRAM, as a decode step
// does. Counter GBps = stored bytes (values + scales) read per second;
// BM_ReadFloor reads the same bytes without decoding them (the floor).
// BM_Gemm: the same weights times 16 or 64 token rows (prefill, tokens sorted
// per expert), GFLOP/s against BM_FmaPeak, the FMA throughput of this
// machine measured in the same run (machine_peaks.cc, linked in). Compare
// variants within one run.
// BM_DenseGemm: the dense (bf16 / fp32 weights) GEMM at prefill shapes, the
// AVX2 tiles against the AVX-512 register-blocked kernel (matmul_dense.h).
//
//   bazel build //engine/bench:quant_gemv_benchmark
//   nice -n 19 bazel-bin/engine/bench/quant_gemv_benchmark --benchmark_repetitions=3 \
//       --benchmark_enable_random_interleaving=true
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/column_lanes_avx512.h"
#include "engine/backend/cpu/host_buffer.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/matmul_dense.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/weight_quantize.h"

namespace expertd::engine {
namespace {

constexpr int64_t kN = 1024, kK = 2048;
// Matrices of random weights; more are copies of these (the bytes differ
// in address, which is what the caches see).
constexpr int64_t kDistinctMatrices = 48;
constexpr uint64_t kCycledBytes = uint64_t{128} << 20;

// The matrices lie one after another in one buffer from the CPU backend's
// allocator (huge pages), values then scales, as the expert cache's slots
// hold them: the kernels read the pages the engine's do.
struct Matrices {
  cpu::HostBuffer slab;
  uint64_t value_bytes = 0, scale_bytes = 0, stride = 0;
  WeightQuant quant;
  uint64_t bytes = 0;  // per matrix, values + scales
  int64_t count = 0;   // matrices in the slab
  uint8_t* values(int64_t i) const { return slab.get() + i * stride; }
  uint8_t* scales(int64_t i) const {
    return scale_bytes == 0 ? nullptr : values(i) + (value_bytes + 63) / 64 * 64;
  }
};

// FP8 E4M3 codes with DeepSeek's 128 x 128 fp32 block scales (amax / 448).
void QuantizeFp8Blocks(const std::vector<float>& w, uint8_t* codes, float* scales) {
  constexpr int64_t kB = 128;
  for (int64_t br = 0; br < kN / kB; ++br) {
    for (int64_t bc = 0; bc < kK / kB; ++bc) {
      float amax = 0;
      for (int64_t r = br * kB; r < (br + 1) * kB; ++r) {
        for (int64_t c = bc * kB; c < (bc + 1) * kB; ++c) {
          amax = std::max(amax, std::fabs(w[r * kK + c]));
        }
      }
      const float scale = amax > 0 ? amax / 448.0f : 1.0f;
      scales[br * (kK / kB) + bc] = scale;
      for (int64_t r = br * kB; r < (br + 1) * kB; ++r) {
        for (int64_t c = bc * kB; c < (bc + 1) * kB; ++c)
          codes[r * kK + c] = models::F32ToE4m3(w[r * kK + c] / scale);
      }
    }
  }
}

// Format codes: 0 bf16 (dense), 1 int8, 2 int4, 3 mxfp4, 4 fp8 E4M3 with
// 128 x 128 block scales; group 32 or 128 (mxfp4: 32; fp8: 128).
const Matrices& Weights(int format, int group) {
  static std::vector<Matrices> cache(10);
  Matrices& m = cache[format * 2 + (group == 128)];
  if (m.slab) return m;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(kN * kK);
  m.quant.format = static_cast<WeightFormat>(format);
  m.quant.group_size = group;
  m.quant.scale_dtype = format == 3 ? ScaleDType::kE8M0 : ScaleDType::kF16;
  if (format == 4) m.quant = Fp8BlockQuant(nullptr, 128, 128);
  if (format == 0) {
    m.value_bytes = kN * kK * 2;
  } else if (format == 4) {
    m.value_bytes = kN * kK;
    m.scale_bytes = kN / 128 * kK / 128 * sizeof(float);
  } else {
    m.value_bytes = QuantValueBytes(m.quant.format, kN, kK);
    m.scale_bytes = QuantScaleBytes(m.quant, kN, kK);
  }
  m.stride = (m.value_bytes + 63) / 64 * 64 + (m.scale_bytes + 63) / 64 * 64;
  m.count = std::max<int64_t>(kDistinctMatrices,
                              static_cast<int64_t>((kCycledBytes + m.stride - 1) / m.stride));
  m.slab = cpu::MakeHostBuffer(m.stride * m.count);
  for (int64_t i = 0; i < kDistinctMatrices; ++i) {
    for (float& v : w) v = d(rng);
    if (format == 4) {
      QuantizeFp8Blocks(w, m.values(i), reinterpret_cast<float*>(m.scales(i)));
    } else if (format == 0) {
      models::ConvertFromF32(models::DType::kBF16, w.data(), m.values(i), w.size());
    } else {
      (void)QuantizeWeights(w.data(), kN, kK, m.quant, m.values(i), m.scales(i));
    }
  }
  for (int64_t i = kDistinctMatrices; i < m.count; ++i)
    std::memcpy(m.values(i), m.values(i % kDistinctMatrices), m.stride);
  m.bytes = m.value_bytes + m.scale_bytes;
  return m;
}

// The dtype a WeightRef of the format's matrices carries.
models::DType StoredDType(int format) {
  return format == 4 ? models::DType::kF8E4M3 : models::DType::kBF16;
}

// The generic AVX-512 loop (QuantMatmulAvx512Generic) on the pool, as
// QuantMatmul splits columns, to compare with the blocked kernel in one run.
void GenericAvx512(const MatmulParams& p, ThreadPool* pool) {
  const int64_t n = p.w.rows, chunk = std::max<int64_t>(8, n / (4 * pool->num_threads()));
  ParallelFor(pool, (n + chunk - 1) / chunk, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      cpu::QuantMatmulAvx512Generic(p, i * chunk, std::min(n, (i + 1) * chunk));
  });
}

// Args: {format, variant (0 scalar, 1 avx2, 2 avx512, 3 avx512 generic loop), threads,
// group}. Format 0 (bf16 dense): variant 1 the AVX2 tiles, 2 the AVX-512 ones.
void BM_Gemv(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const bool generic = state.range(1) == 3;
  const auto isa = generic ? cpu::CpuIsa::kAvx512 : static_cast<cpu::CpuIsa>(state.range(1));
  if (!cpu::CpuSupports(isa)) {
    state.SkipWithError("the CPU lacks this ISA");
    return;
  }
  const Matrices& m = Weights(format, static_cast<int>(state.range(3)));
  ThreadPool pool(static_cast<int>(state.range(2)));
  std::vector<float> x(kK, 0.5f), y(kN);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = kK;
  p.y = y.data();
  p.y_stride = kN;
  p.m = 1;
  p.w = WeightRef{nullptr, StoredDType(format), kN, kK, m.quant};
  int64_t i = 0;
  for (auto _ : state) {
    p.w.data = m.values(i);
    p.w.quant.scales = m.scales(i);
    if (format == 0) {
      cpu::DenseMatmul(p, &pool, isa);
    } else if (generic) {
      GenericAvx512(p, &pool);
    } else {
      cpu::QuantMatmul(p, &pool, isa);
    }
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % m.count;
  }
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(m.bytes) * state.iterations(),
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(format == 0 ? "bf16 dense" : WeightFormatName(m.quant.format)) +
                 (format == 0 ? "" : "-g" + std::to_string(m.quant.group_size)) + " " +
                 cpu::CpuIsaName(isa) + (generic ? "-generic" : ""));
}

// The floor: the same stored bytes (values + scales of the same matrices,
// same thread split) only read, with AVX2 loads into an xor, nothing decoded.
// Args: {format, threads, group}.
uint64_t XorBytes(const uint8_t* p, uint64_t bytes) {
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  uint64_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  uint64_t tail = 0;
  for (; i < bytes; ++i) tail ^= p[i];
  a = _mm256_xor_si256(a, b);
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3)) ^ tail;
}

void BM_ReadFloor(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const Matrices& m = Weights(format, static_cast<int>(state.range(2)));
  ThreadPool pool(static_cast<int>(state.range(1)));
  constexpr int64_t kChunks = 16;  // of the values; the scales read by chunk 0
  int64_t i = 0;
  std::vector<uint64_t> sink(kChunks);
  for (auto _ : state) {
    const uint8_t* v = m.values(i);
    const uint64_t chunk = m.value_bytes / kChunks;
    ParallelFor(&pool, kChunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        sink[c] = XorBytes(v + c * chunk, chunk);
        if (c == 0 && m.scale_bytes != 0) sink[c] ^= XorBytes(m.scales(i), m.scale_bytes);
      }
    });
    benchmark::DoNotOptimize(sink.data());
    i = (i + 1) % m.count;
  }
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(m.bytes) * state.iterations(),
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(format == 0 ? "bf16" : WeightFormatName(m.quant.format)) +
                 (format == 0 ? "" : "-g" + std::to_string(m.quant.group_size)) + " read only");
}
BENCHMARK(BM_ReadFloor)
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2}, {32}})
    ->Args({1, 1, 128})
    ->Args({1, 2, 128})
    ->Args({2, 1, 128})
    ->Args({2, 2, 128})
    ->Args({4, 1, 128})
    ->Args({4, 2, 128})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The one-row int8 kernel's reads without its decoding: an int8 matrix's
// value bytes (2 MiB, rows of kK codes) read in one of four orders, 16
// lines a step, each line loaded, flipped to unsigned and fed to one
// vpdpbusd against a constant x. Orders: 0 address order (one stream); 1
// the same with each step prefetching (T1) the 16 lines 64 KiB ahead; 2
// 16 rows at a time, 64 bytes of each a step, a tile of 32 rows after
// another (the one-row kernel's order: 16 streams); 3 order 2 with the
// kernel's prefetch (the next tile's lines in address order, 16 a step,
// also 64 KiB ahead). Work 1 adds what the kernel does with a step's 16
// vectors: the 16-column reduction (ReduceSixteen) and two fp32 FMAs.
// Against BM_ReadFloor, this separates the cost of the order from the cost
// of the arithmetic. Args: {order, work}; one thread.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"))) float ReadInOrder(
    const uint8_t* v, int order, int work) {
  constexpr int64_t kSteps = kN * kK / 1024, kTileBytes = 32 * kK, kTileSteps = kTileBytes / 1024;
  const __m512i x = _mm512_set1_epi8(3), flip = _mm512_set1_epi8(-128);
  const char* end = reinterpret_cast<const char*>(v) + kN * kK;
  __m512i part[16];
  for (__m512i& p : part) p = _mm512_setzero_si512();
  __m512 acc = _mm512_setzero_ps();
  for (int64_t s = 0; s < kSteps; ++s) {
    const uint8_t* lines[16];
    const int64_t tile = s / kTileSteps, in_tile = s % kTileSteps;
    for (int l = 0; l < 16; ++l) {
      lines[l] = order < 2 ? v + s * 1024 + 64 * l
                           : v + tile * kTileBytes + (16 * (in_tile / (kK / 64)) + l) * kK +
                                 64 * (in_tile % (kK / 64));
    }
    if (order == 1 || order == 3) {
      const char* ahead = reinterpret_cast<const char*>(v) + s * 1024 + 65536;
      for (int l = 0; l < 16; ++l) {
        if (ahead + 64 * l < end) _mm_prefetch(ahead + 64 * l, _MM_HINT_T1);
      }
    }
    if (work == 0) {
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) {
        const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(lines[l]), flip);
        part[l] = _mm512_dpbusd_epi32(part[l], w, x);
      }
      continue;
    }
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) {
      const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(lines[l]), flip);
      part[l] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x);
    }
    __m512i first, second;
    cpu::ReduceSixteen(part, &first, &second);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(first), _mm512_set1_ps(0.5f), acc);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(second), _mm512_set1_ps(0.25f), acc);
  }
  __m512i sum = part[0];
  for (int l = 1; l < 16; ++l) sum = _mm512_add_epi32(sum, part[l]);
  return _mm512_reduce_add_ps(_mm512_add_ps(acc, _mm512_cvtepi32_ps(sum)));
}

void BM_ReadOrder(benchmark::State& state) {
  if (!cpu::CpuSupportsInt8Dot()) {
    state.SkipWithError("the CPU lacks AVX-512-VNNI");
    return;
  }
  const int order = static_cast<int>(state.range(0)), work = static_cast<int>(state.range(1));
  const Matrices& m = Weights(1, 32);
  int64_t i = 0;
  float sink = 0;
  for (auto _ : state) {
    sink += ReadInOrder(m.values(i), order, work);
    i = (i + 1) % m.count;
  }
  benchmark::DoNotOptimize(sink);
  state.counters["GBps"] = benchmark::Counter(
      static_cast<double>(m.value_bytes) * state.iterations(), benchmark::Counter::kIsRate);
  static const char* const kOrders[] = {"one stream", "one stream, prefetch 64 KiB ahead",
                                        "16 rows at a time", "16 rows, next tile prefetched"};
  state.SetLabel(std::string(kOrders[order]) + (work == 0 ? "" : ", + reduction"));
}
BENCHMARK(BM_ReadOrder)
    ->ArgsProduct({{0, 1, 2, 3}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Prefill: y = X W^T for `tokens` rows (the tokens routed to one expert),
// GFLOP/s = 2 m n k / time. Args: {format, variant (2 avx512, 3 avx512
// generic loop), tokens, threads, group}. With one thread, compare the CPU
// time's rate with BM_FmaPeak's.
void BM_Gemm(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const bool generic = state.range(1) == 3;
  const int64_t tokens = state.range(2);
  if (!cpu::CpuSupports(cpu::CpuIsa::kAvx512)) {
    state.SkipWithError("the CPU lacks AVX-512");
    return;
  }
  const Matrices& m = Weights(format, static_cast<int>(state.range(4)));
  ThreadPool pool(static_cast<int>(state.range(3)));
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(tokens * kK), y(tokens * kN);
  for (float& v : x) v = d(rng);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = kK;
  p.y = y.data();
  p.y_stride = kN;
  p.m = tokens;
  p.w = WeightRef{nullptr, StoredDType(format), kN, kK, m.quant};
  int64_t i = 0;
  for (auto _ : state) {
    p.w.data = m.values(i);
    p.w.quant.scales = m.scales(i);
    if (format == 0) {
      cpu::Matmul(p, &pool);
    } else if (generic) {
      GenericAvx512(p, &pool);
    } else {
      cpu::QuantMatmul(p, &pool, cpu::CpuIsa::kAvx512);
    }
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % m.count;
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * tokens * kN * kK * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["MFLOP"] = 2.0 * tokens * kN * kK / 1e6;  // per call: / CPU us = GFLOP/s
  state.SetLabel(std::string(format == 0 ? "bf16 dense" : WeightFormatName(m.quant.format)) +
                 (format == 0 ? "" : "-g" + std::to_string(m.quant.group_size)) +
                 (format == 0 ? " avx2"
                  : generic   ? " avx512-generic"
                              : " avx512"));
}
BENCHMARK(BM_Gemm)
    ->ArgsProduct({{1, 2, 3}, {3, 2}, {16, 64}, {1}, {32}})
    ->Args({2, 3, 64, 1, 128})
    ->Args({2, 2, 64, 1, 128})
    ->Args({0, 1, 16, 1, 32})
    ->Args({0, 1, 64, 1, 32})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ~96 MiB of [n, kK] matrices (at least 3) of values in [-1, 1), made once
// per (dtype, n); fp32 elements are two uint16_t.
const std::vector<std::vector<uint16_t>>& DenseWeights(models::DType dtype, int64_t n) {
  static std::map<std::pair<int, int64_t>, std::vector<std::vector<uint16_t>>> cache;
  auto& mats = cache[{static_cast<int>(dtype), n}];
  if (!mats.empty()) return mats;
  const int64_t bytes = n * kK * (dtype == models::DType::kBF16 ? 2 : 4);
  mats.assign(std::max<int64_t>(3, (int64_t{96} << 20) / bytes), std::vector<uint16_t>(bytes / 2));
  uint32_t seed = 12345;
  for (auto& mat : mats) {
    for (size_t i = 0; i < mat.size(); ++i) {
      seed = seed * 1664525u + 1013904223u;  // the high half: a sign, exponent 2^-7, 7 bits
      const uint16_t high = static_cast<uint16_t>(0x3C00u | (seed >> 16 & 0x807Fu));
      mat[i] =
          dtype == models::DType::kBF16 || i % 2 == 1 ? high : static_cast<uint16_t>(seed >> 16);
    }
  }
  return mats;
}

// Dense prefill GEMM: y = X W^T, W [n, 2048] bf16 or fp32, cycled through
// ~96 MiB of matrices (more than the L3, as a layer's weights are), X `tokens`
// rows. Args: {dtype: 1 bf16, 0 fp32; isa: 0 avx2, 1 avx512, 2 bf16
// activations (vdpbf16ps; bf16 weights only); tokens; threads; n}. GFLOP/s =
// 2 m n k / time; with one thread compare it with BM_FmaPeak/1 (and
// BM_Bf16DotPeak/1 for isa 2).
void BM_DenseGemm(benchmark::State& state) {
  const models::DType dtype = state.range(0) == 1 ? models::DType::kBF16 : models::DType::kF32;
  const cpu::CpuIsa isa = state.range(1) >= 1 ? cpu::CpuIsa::kAvx512 : cpu::CpuIsa::kAvx2;
  const bool bf16_dot = state.range(1) == 2;
  const int64_t tokens = state.range(2), n = state.range(4);
  if (isa == cpu::CpuIsa::kAvx512 && !cpu::CpuSupports(isa)) {
    state.SkipWithError("the CPU lacks AVX-512");
    return;
  }
  if (bf16_dot && !cpu::CpuSupportsBf16Dot()) {
    state.SkipWithError("the CPU lacks AVX-512-BF16");
    return;
  }
  const std::vector<std::vector<uint16_t>>& mats = DenseWeights(dtype, n);
  const int64_t count = static_cast<int64_t>(mats.size());
  ThreadPool pool(static_cast<int>(state.range(3)));
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(tokens * kK), y(tokens * n);
  for (float& v : x) v = d(rng);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = kK;
  p.y = y.data();
  p.y_stride = n;
  p.m = tokens;
  p.w = WeightRef{nullptr, dtype, n, kK, {}};
  if (bf16_dot) p.activations = MatmulActivations::kBF16;
  int64_t i = 0;
  for (auto _ : state) {
    p.w.data = mats[i].data();
    cpu::DenseMatmul(p, &pool, isa);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % count;
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * tokens * n * kK * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["MFLOP"] = 2.0 * tokens * n * kK / 1e6;  // per call: / CPU us = GFLOP/s
  state.SetLabel(std::string(models::DTypeName(dtype)) + " " +
                 (bf16_dot ? "avx512bf16 (bf16 x)" : cpu::CpuIsaName(isa)));
}
BENCHMARK(BM_DenseGemm)
    ->ArgsProduct({{1, 0}, {0, 1}, {16, 64, 512}, {1}, {1024, 2048}})
    ->ArgsProduct({{1}, {2}, {16, 64, 512}, {1}, {1024, 2048}})
    ->ArgsProduct({{1}, {0, 1, 2}, {64, 512}, {2}, {2048}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Marks the benchmark skipped when the CPU lacks the activation mode's
// dot-product instructions.
bool SkippedWithoutDot(MatmulActivations mode, benchmark::State& state) {
  if ((mode == MatmulActivations::kBF16 && !cpu::CpuSupportsBf16Dot()) ||
      (mode == MatmulActivations::kInt8 && !cpu::CpuSupportsInt8Activations())) {
    state.SkipWithError("the CPU lacks the mode's dot-product instructions");
    return true;
  }
  return false;
}

// Prefill per activations mode: the same weights and rows through Matmul
// with fp32, bf16 (vdpbf16ps) or int8 (vpdpbusd) activations. Args:
// {format 0 bf16 (dense) / 1 int8 / 2 int4 / 3 mxfp4 / 4 fp8, mode 0 fp32 / 1 bf16 / 2 int8,
// tokens, threads, group}. GFLOP/s = 2 m n k / time: compare with BM_FmaPeak,
// BM_Bf16DotPeak and BM_Int8DotPeak of the same threads.
void BM_GemmActivations(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const auto mode = static_cast<MatmulActivations>(state.range(1));
  const int64_t tokens = state.range(2);
  if (SkippedWithoutDot(mode, state)) return;
  const Matrices& m = Weights(format, static_cast<int>(state.range(4)));
  ThreadPool pool(static_cast<int>(state.range(3)));
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(tokens * kK), y(tokens * kN);
  for (float& v : x) v = d(rng);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = kK;
  p.y = y.data();
  p.y_stride = kN;
  p.m = tokens;
  p.w = WeightRef{nullptr, StoredDType(format), kN, kK, m.quant};
  p.activations = mode;
  int64_t i = 0;
  for (auto _ : state) {
    p.w.data = m.values(i);
    p.w.quant.scales = m.scales(i);
    cpu::Matmul(p, &pool);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % m.count;
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * tokens * kN * kK * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(m.bytes) * state.iterations(),
                                              benchmark::Counter::kIsRate);
  state.SetLabel((format == 0 ? std::string("bf16 dense")
                              : std::string(WeightFormatName(m.quant.format)) + "-g" +
                                    std::to_string(m.quant.group_size)) +
                 " " + MatmulActivationsName(mode) + " activations");
}
// A decode step's routed experts of one layer: one token's row times
// kTopK of the cycled matrices, one GroupedMatmul (the engine's call), so
// the split over threads and the seams between experts are measured too.
// Args: {format, activations, threads, group}.
void BM_GroupedDecode(benchmark::State& state) {
  constexpr int64_t kTopK = 8;
  const int format = static_cast<int>(state.range(0));
  const auto mode = static_cast<MatmulActivations>(state.range(1));
  if (SkippedWithoutDot(mode, state)) return;
  const Matrices& m = Weights(format, static_cast<int>(state.range(3)));
  ThreadPool pool(static_cast<int>(state.range(2)));
  std::mt19937 rng(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(kTopK * kK), y(kTopK * kN);
  for (int64_t r = 0; r < kTopK; ++r) {  // the same token in every expert's row
    for (int64_t c = 0; c < kK; ++c) x[r * kK + c] = r == 0 ? d(rng) : x[c];
  }
  std::vector<WeightRef> w(kTopK, WeightRef{nullptr, StoredDType(format), kN, kK, m.quant});
  std::vector<int64_t> row_offset(kTopK + 1);
  for (int64_t g = 0; g <= kTopK; ++g) row_offset[g] = g;
  GroupedMatmulParams p;
  p.x = x.data();
  p.x_stride = kK;
  p.w = w.data();
  p.row_offset = row_offset.data();
  p.groups = kTopK;
  p.y = y.data();
  p.y_stride = kN;
  p.n = kN;
  p.k = kK;
  p.activations = mode;
  int64_t i = 0;
  for (auto _ : state) {
    for (int64_t g = 0; g < kTopK; ++g, i = (i + 1) % m.count) {
      w[g].data = m.values(i);
      w[g].quant.scales = m.scales(i);
    }
    cpu::GroupedMatmul(p, &pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GBps"] = benchmark::Counter(
      static_cast<double>(m.bytes) * kTopK * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel((format == 0 ? std::string("bf16")
                              : std::string(WeightFormatName(m.quant.format)) + "-g" +
                                    std::to_string(m.quant.group_size)) +
                 " " + MatmulActivationsName(mode) + " activations");
}
BENCHMARK(BM_GroupedDecode)
    ->ArgsProduct({{0}, {1}, {1, 2}, {32}})
    ->ArgsProduct({{1, 2, 3}, {0, 2}, {1, 2}, {32}})
    ->ArgsProduct({{4}, {0, 1}, {1, 2}, {128}})
    ->UseRealTime();

BENCHMARK(BM_GemmActivations)
    ->ArgsProduct({{0}, {0, 1}, {1}, {1, 2}, {32}})
    ->ArgsProduct({{1, 2, 3}, {0, 1, 2}, {1, 16, 64, 256}, {1}, {32}})
    ->ArgsProduct({{2}, {1, 2}, {64, 256}, {1}, {128}})
    ->ArgsProduct({{2}, {1, 2}, {1, 256}, {2}, {32}})
    ->ArgsProduct({{4}, {0, 1}, {1, 16, 64, 256}, {1}, {128}})
    ->ArgsProduct({{4}, {0, 1}, {1, 256}, {2}, {128}})
    ->UseRealTime();

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int variant : {1, 2}) b->Args({0, variant, threads, 32});
    for (int variant : {1, 2}) b->Args({4, variant, threads, 128});
    for (auto [format, group] : {std::pair{1, 32}, {1, 128}, {2, 32}, {2, 128}, {3, 32}}) {
      for (int variant : {0, 1, 3, 2}) b->Args({format, variant, threads, group});
    }
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_Gemv)->Apply(Args);

}  // namespace
}  // namespace expertd::engine

BENCHMARK_MAIN();
