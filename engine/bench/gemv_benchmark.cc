// GEMV (decode, m = 1) with our batch-invariant kernel vs OpenBLAS sgemv, on
// the shapes of an OLMoE-1B-7B decode: expert gate/up [1024, 2048], expert
// down [2048, 1024], attention [2048, 2048], LM head [50304, 2048].
// Debian's OpenBLAS 0.3.21 is built without bfloat16 (no cblas_sbgemv), so
// bf16 is ours only.
//
//   bazel run -c opt //engine/bench:gemv_benchmark
#include <cblas.h>

#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/backend/cpu/thread_pool.h"

extern "C" void openblas_set_num_threads(int);

namespace expertd::engine {
namespace {

struct Problem {
  int64_t n, k;
  std::vector<float> w32, x, y;
  std::vector<uint16_t> w16;
  Problem(int64_t n_, int64_t k_) : n(n_), k(k_), w32(n_ * k_), x(k_), y(n_), w16(n_ * k_) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d;
    for (int64_t i = 0; i < n * k; ++i) {
      w32[i] = d(rng);
      uint32_t bits;
      std::memcpy(&bits, &w32[i], 4);
      w16[i] = static_cast<uint16_t>(bits >> 16);
    }
    for (float& v : x) v = d(rng);
  }
};

int Threads(const benchmark::State& s) {
  return s.range(2) == 0 ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                         : static_cast<int>(s.range(2));
}

void Report(benchmark::State& state, const Problem& p, size_t elem_bytes) {
  state.counters["GBps"] =
      benchmark::Counter(static_cast<double>(p.n * p.k * elem_bytes) * state.iterations() / 1e9,
                         benchmark::Counter::kIsRate);
}

void BM_Ours(benchmark::State& state, models::DType dtype) {
  Problem p(state.range(0), state.range(1));
  ThreadPool pool(Threads(state));
  MatmulParams m;
  m.x = p.x.data();
  m.x_stride = p.k;
  m.w.data = dtype == models::DType::kF32 ? static_cast<const void*>(p.w32.data()) : p.w16.data();
  m.w.dtype = dtype;
  m.w.rows = p.n;
  m.w.cols = p.k;
  m.y = p.y.data();
  m.y_stride = p.n;
  m.m = 1;
  for (auto _ : state) {
    cpu::Matmul(m, &pool);
    benchmark::DoNotOptimize(p.y.data());
  }
  Report(state, p, models::DTypeSize(dtype));
}

void BM_OursF32(benchmark::State& state) { BM_Ours(state, models::DType::kF32); }
void BM_OursBf16(benchmark::State& state) { BM_Ours(state, models::DType::kBF16); }

void BM_OpenBlasSgemv(benchmark::State& state) {
  Problem p(state.range(0), state.range(1));
  openblas_set_num_threads(Threads(state));
  for (auto _ : state) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(p.n), static_cast<int>(p.k), 1.0f,
                p.w32.data(), static_cast<int>(p.k), p.x.data(), 1, 0.0f, p.y.data(), 1);
    benchmark::DoNotOptimize(p.y.data());
  }
  Report(state, p, 4);
}

// {n, k, threads (0 = all cores)}
void Shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 0}) {
    b->Args({1024, 2048, threads});
    b->Args({2048, 1024, threads});
    b->Args({2048, 2048, threads});
    b->Args({50304, 2048, threads});
  }
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_OursF32)->Apply(Shapes);
BENCHMARK(BM_OursBf16)->Apply(Shapes);
BENCHMARK(BM_OpenBlasSgemv)->Apply(Shapes);

}  // namespace
}  // namespace expertd::engine

BENCHMARK_MAIN();
