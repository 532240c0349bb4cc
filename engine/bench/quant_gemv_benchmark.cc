// The quantized GEMV (decode, m = 1) per weight format and per kernel variant
// (scalar reference, AVX2, AVX-512), on OLMoE-1B-7B's expert shapes, against
// the bf16 dense kernel on the same shape. The weights of 48 experts' gate
// matrices are cycled through, so every call reads them from DRAM (more than
// the 32 MiB L3), as a decode step does. Counter GBps = stored bytes (values +
// scales) read per second; compare variants within one run.
//
//   bazel build //engine/bench:quant_gemv_benchmark
//   nice -n 19 bazel-bin/engine/bench/quant_gemv_benchmark --benchmark_repetitions=3
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/weight_quantize.h"

namespace expertd::engine {
namespace {

constexpr int64_t kN = 1024, kK = 2048, kMatrices = 48;

struct Matrices {
  std::vector<std::vector<uint8_t>> values, scales;
  WeightQuant quant;
  uint64_t bytes = 0;  // per matrix, values + scales
};

// Format codes: 0 bf16 (dense), 1 int8, 2 int4, 3 mxfp4; group 32.
const Matrices& Weights(int format) {
  static std::vector<Matrices> cache(4);
  Matrices& m = cache[format];
  if (!m.values.empty()) return m;
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(kN * kK);
  m.quant.format = static_cast<WeightFormat>(format);
  m.quant.group_size = 32;
  m.quant.scale_dtype = format == 3 ? ScaleDType::kE8M0 : ScaleDType::kF16;
  for (int64_t i = 0; i < kMatrices; ++i) {
    for (float& v : w) v = d(rng);
    if (format == 0) {
      m.values.emplace_back(kN * kK * 2);
      models::ConvertFromF32(models::DType::kBF16, w.data(), m.values.back().data(), w.size());
      m.scales.emplace_back();
      continue;
    }
    m.values.emplace_back(QuantValueBytes(m.quant.format, kN, kK));
    m.scales.emplace_back(QuantScaleBytes(m.quant, kN, kK));
    (void)QuantizeWeights(w.data(), kN, kK, m.quant, m.values.back().data(),
                          m.scales.back().data());
  }
  m.bytes = m.values[0].size() + m.scales[0].size();
  return m;
}

// Args: {format, isa (0 scalar, 1 avx2, 2 avx512), threads}.
void BM_Gemv(benchmark::State& state) {
  const int format = static_cast<int>(state.range(0));
  const auto isa = static_cast<cpu::CpuIsa>(state.range(1));
  if (!cpu::CpuSupports(isa)) {
    state.SkipWithError("the CPU lacks this ISA");
    return;
  }
  const Matrices& m = Weights(format);
  ThreadPool pool(static_cast<int>(state.range(2)));
  std::vector<float> x(kK, 0.5f), y(kN);
  MatmulParams p;
  p.x = x.data();
  p.x_stride = kK;
  p.y = y.data();
  p.y_stride = kN;
  p.m = 1;
  p.w = WeightRef{nullptr, models::DType::kBF16, kN, kK, m.quant};
  int64_t i = 0;
  for (auto _ : state) {
    p.w.data = m.values[i].data();
    p.w.quant.scales = m.scales[i].data();
    if (format == 0) {
      cpu::Matmul(p, &pool);
    } else {
      cpu::QuantMatmul(p, &pool, isa);
    }
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % kMatrices;
  }
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(m.bytes) * state.iterations(),
                                              benchmark::Counter::kIsRate);
  state.SetLabel(std::string(format == 0 ? "bf16 dense" : WeightFormatName(m.quant.format)) +
                 " " + cpu::CpuIsaName(isa));
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({0, 1, threads});
    for (int format : {1, 2, 3}) {
      for (int isa : {0, 1, 2}) b->Args({format, isa, threads});
    }
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_Gemv)->Apply(Args);

}  // namespace
}  // namespace expertd::engine

BENCHMARK_MAIN();
