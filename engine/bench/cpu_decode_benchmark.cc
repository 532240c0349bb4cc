// Decode step time on the CPU backend for a model with OLMoE-1B-7B's layer
// shapes (hidden 2048, 64 experts of width 1024, top-8, 16 heads / 16 kv,
// head_dim 128, vocab 50304, 4 layers), random weights generated in memory,
// against the memory-bandwidth floor: bytes of weights one decode token reads
// / bandwidth of a STREAM-like copy measured in the same run.
//
//   bazel run -c opt //engine/bench:cpu_decode_benchmark
//
// Counters: ms_per_token (mean step), ms_median (median step), floor_ms (bytes
// touched / copy bandwidth), x_floor = ms_median / floor_ms, weight_GBps
// (bytes touched / median step), copy_GBps (STREAM copy, read + write bytes),
// read_GBps (a streaming sum), x_read_floor = ms_median / (bytes / read
// bandwidth) (a GEMV only reads, so this floor is the tighter one).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/bench/synthetic_model.h"
#include "engine/engine.h"
#include "engine/greedy.h"

namespace expertd::engine {
namespace {

int HardwareThreads() { return std::max(1u, std::thread::hardware_concurrency()); }

struct Bandwidth {
  double copy_gbps = 0;  // STREAM convention: (read + written bytes) / time
  double read_gbps = 0;  // a sum over the array: read bytes / time
};

// Best of 5 passes over two 256 MiB arrays, split over `threads` threads.
Bandwidth MeasureBandwidth(int threads) {
  const int64_t n = 64ll << 20;  // floats
  float* a = static_cast<float*>(std::aligned_alloc(64, n * 4));
  float* b = static_cast<float*>(std::aligned_alloc(64, n * 4));
  ThreadPool pool(threads);
  pool.ParallelFor(n / 8, 1, [&](int64_t s, int64_t e) {
    for (int64_t i = s * 8; i < e * 8; ++i) a[i] = b[i] = 1.0f;
  });
  auto time = [&](auto&& fn) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double copy_s = time([&] {
    pool.ParallelFor(n / 8, 1024, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) _mm256_store_ps(b + i * 8, _mm256_load_ps(a + i * 8));
    });
  });
  std::vector<float> sums(threads * 16, 0.0f);
  const double read_s = time([&] {
    pool.ParallelFor(n / 8, 1024, [&](int64_t s, int64_t e) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      int64_t i = s;
      for (; i + 1 < e; i += 2) {
        acc0 = _mm256_add_ps(acc0, _mm256_load_ps(a + i * 8));
        acc1 = _mm256_add_ps(acc1, _mm256_load_ps(a + i * 8 + 8));
      }
      if (i < e) acc0 = _mm256_add_ps(acc0, _mm256_load_ps(a + i * 8));
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_add_ps(acc0, acc1));
      sums[(s * threads / (n / 8)) * 16] += out[0];
    });
  });
  benchmark::DoNotOptimize(sums.data());
  std::free(a);
  std::free(b);
  return Bandwidth{2.0 * n * 4 / copy_s / 1e9, 1.0 * n * 4 / read_s / 1e9};
}

models::zoo::ZooSpec OlmoeSpec(models::DType dtype) {
  auto spec = models::zoo::PresetSpec("olmoe_1b7b_4l", models::Architecture::kOlmoe);
  spec->vocab = 50304;
  spec->dtype = dtype;
  spec->seed = 7;
  return *spec;
}

// One model at a time (fp32 weights are ~7 GB).
std::shared_ptr<InMemoryWeightSource> Weights(models::DType dtype) {
  static std::shared_ptr<InMemoryWeightSource> cached;
  static models::DType cached_dtype;
  if (!cached || cached_dtype != dtype) {
    cached.reset();
    cached = *SyntheticWeights(OlmoeSpec(dtype));
    cached_dtype = dtype;
  }
  return cached;
}

void DecodeWith(benchmark::State& state, models::DType dtype, int threads, ExpertGemm gemm) {
  std::shared_ptr<InMemoryWeightSource> weights = Weights(dtype);
  const Bandwidth bw = MeasureBandwidth(threads);
  EngineOptions opts;
  opts.backend.threads = threads;
  opts.kv_cache_bytes = 512ull << 20;
  opts.expert_gemm = gemm;
  auto engine_or = Engine::Create(weights, opts);
  if (!engine_or.ok()) {
    state.SkipWithError(engine_or.status().ToString().c_str());
    return;
  }
  Engine& engine = **engine_or;
  const std::vector<int32_t> prompt = {11, 2027, 305, 9, 4000, 77, 123, 50000,
                                       42, 7,    8,   9, 10,   11, 12,  13};
  SequenceId id = 1;
  int32_t next = 0;
  auto restart = [&] {
    if (engine.HasSequence(id)) (void)engine.RemoveSequence(id);
    ++id;
    (void)engine.AddSequence(id);
    auto r = engine.Step(StepRequest{{SequenceChunk{id, prompt}}});
    next = Argmax(r->sequences[0].logits);
  };
  restart();
  std::vector<double> step_s;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = engine.Step(StepRequest{{SequenceChunk{id, {next}}}});
    next = Argmax(r->sequences[0].logits);
    step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (*engine.SequenceLength(id) >= 512) {
      state.PauseTiming();
      restart();
      state.ResumeTiming();
    }
  }
  const uint64_t bytes = DecodeBytesTouched(weights->config(), dtype);
  const double floor_s = bytes / (bw.copy_gbps * 1e9);
  // Mean, and the median step (robust to other processes on a shared machine).
  double total = 0;
  for (double t : step_s) total += t;
  const double mean_s = total / std::max<size_t>(1, step_s.size());
  std::sort(step_s.begin(), step_s.end());
  const double per_token_s = step_s.empty() ? 0 : step_s[step_s.size() / 2];
  state.counters["ms_per_token"] = mean_s * 1e3;
  state.counters["ms_median"] = per_token_s * 1e3;
  state.counters["x_floor"] = per_token_s / floor_s;
  // GEMV only reads: the read-bandwidth floor is the tighter one.
  state.counters["x_read_floor"] = per_token_s / (bytes / (bw.read_gbps * 1e9));
  state.counters["bytes_touched_MB"] = bytes / 1e6;
  state.counters["copy_GBps"] = bw.copy_gbps;
  state.counters["read_GBps"] = bw.read_gbps;
  state.counters["floor_ms"] = floor_s * 1e3;
  state.counters["weight_GBps"] = bytes / per_token_s / 1e9;
  state.SetLabel(std::string(models::DTypeName(dtype)) + ", " + std::to_string(threads) +
                 " threads, expert_gemm " + ExpertGemmName(gemm));
}

void BM_Decode(benchmark::State& state) {
  const models::DType dtype = state.range(0) == 0 ? models::DType::kF32 : models::DType::kBF16;
  const int threads = state.range(1) == 0 ? HardwareThreads() : static_cast<int>(state.range(1));
  DecodeWith(state, dtype, threads, ExpertGemm::kAuto);
}

constexpr ExpertGemm kGemms[] = {ExpertGemm::kAuto, ExpertGemm::kPerExpert, ExpertGemm::kGrouped};

// The same decode, bf16 on every core, with range(0) choosing the expert
// GEMM: 0 auto, 1 per_expert, 2 grouped (engine/model/expert_gemm.h).
void BM_DecodeExpertGemm(benchmark::State& state) {
  DecodeWith(state, models::DType::kBF16, HardwareThreads(), kGemms[state.range(0)]);
}

// Prefill of a `range(0)`-token prompt (for time-to-first-token), bf16.
void PrefillWith(benchmark::State& state, ExpertGemm gemm) {
  const int threads = HardwareThreads();
  std::shared_ptr<InMemoryWeightSource> weights = Weights(models::DType::kBF16);
  EngineOptions opts;
  opts.backend.threads = threads;
  opts.kv_cache_bytes = 512ull << 20;
  opts.expert_gemm = gemm;
  auto engine = Engine::Create(weights, opts);
  if (!engine.ok()) {
    state.SkipWithError(engine.status().ToString().c_str());
    return;
  }
  std::vector<int32_t> prompt(state.range(0));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919) % 50304);
  SequenceId id = 1;
  for (auto _ : state) {
    (void)(*engine)->AddSequence(id);
    auto r = (*engine)->Step(StepRequest{{SequenceChunk{id, prompt}}});
    benchmark::DoNotOptimize(r->sequences[0].logits.data());
    state.PauseTiming();
    (void)(*engine)->RemoveSequence(id++);
    state.ResumeTiming();
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(prompt.size()) * state.iterations(), benchmark::Counter::kIsRate);
  state.SetLabel("bfloat16, " + std::to_string(threads) + " threads, expert_gemm " +
                 ExpertGemmName(gemm));
}

void BM_Prefill(benchmark::State& state) { PrefillWith(state, ExpertGemm::kAuto); }
BENCHMARK(BM_Prefill)->Arg(16)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

// range(1): 0 auto, 1 per_expert, 2 grouped.
void BM_PrefillExpertGemm(benchmark::State& state) { PrefillWith(state, kGemms[state.range(1)]); }
BENCHMARK(BM_PrefillExpertGemm)
    ->ArgsProduct({{16, 128}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_DecodeExpertGemm)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Args: {dtype: 1 = bf16, 0 = fp32; threads: 0 = all cores}.
BENCHMARK(BM_Decode)
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({0, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace expertd::engine

BENCHMARK_MAIN();
