// The expert MLP (gate/up GEMMs, SwiGLU, down GEMM: RunMlp, the code every
// MoE step runs per expert) on the CPU backend, one thread, fp32:
//
//  BM_ExpertMlp/rows/width/hidden: one expert's MLP over `rows` rows at
//    intermediate width `width`. MoEShard on D devices runs width I/D, so
//    GFLOPS at I/D vs at I is the shard GEMM efficiency that bounds its gain.
//  BM_PerExpertCalls/experts/rows: `experts` MLP calls of `rows` rows each
//    (distinct weights), what the engine does today (one GEMM per active
//    expert), vs BM_OneCall/experts/rows: the same rows and FLOPs as one
//    call; the gap is the per-call cost a grouped GEMM could at best remove.
//
// Thread CPU time is the figure to read on a loaded machine (the "CPU"
// column).
//   bazel run -c opt //engine/parallel:shard_gemm_benchmark
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/backend_factory.h"
#include "engine/model/feed_forward.h"
#include "engine/model/workspace.h"

namespace expertd::engine::parallel {
namespace {

struct Mlp {
  std::vector<float> gate, up, down;
  MlpWeights w;
  Mlp(int64_t width, int64_t hidden, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, 0.05f);
    for (auto* v : {&gate, &up, &down}) {
      v->resize(width * hidden);
      for (float& f : *v) f = d(rng);
    }
    w.gate = WeightRef{gate.data(), DType::kF32, width, hidden};
    w.up = WeightRef{up.data(), DType::kF32, width, hidden};
    w.down = WeightRef{down.data(), DType::kF32, hidden, width};
  }
};

struct Bench {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Workspace> ws;
  std::vector<float> x;
  Bench(int64_t rows, int64_t width, int64_t hidden) {
    BackendOptions o;
    o.threads = 1;
    backend = *CreateBackend(o);
    ModelDims dims;
    dims.hidden = hidden;
    dims.q_width = dims.k_width = dims.v_width = hidden;
    dims.experts = 1;
    dims.top_k = 1;
    dims.max_intermediate = width;
    dims.vocab = 1;
    ws = std::make_unique<Workspace>(backend.get(), dims);
    (void)ws->Prepare(WorkspaceDims{rows, 1, 1});
    x.resize(rows * hidden);
    std::mt19937 rng(5);
    std::normal_distribution<float> d;
    for (float& f : x) f = d(rng);
  }
};

void SetFlops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOPS"] = benchmark::Counter(flops_per_iter * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

void BM_ExpertMlp(benchmark::State& state) {
  const int64_t rows = state.range(0), width = state.range(1), hidden = state.range(2);
  Bench b(rows, width, hidden);
  std::mt19937 rng(1);
  Mlp mlp(width, hidden, rng);
  for (auto _ : state) {
    RunMlp(b.backend.get(), b.ws.get(), mlp.w, b.x.data(), rows, b.ws->f(Buf::kExpertOut), false);
    benchmark::DoNotOptimize(b.ws->f(Buf::kExpertOut)[0]);
  }
  SetFlops(state, 6.0 * rows * width * hidden);
}
// Shards of a 1024-wide expert (D = 1, 2, 4, 8, 16) and of a 256-wide one.
BENCHMARK(BM_ExpertMlp)
    ->ArgNames({"rows", "width", "hidden"})
    ->ArgsProduct({{16, 64, 256}, {1024, 512, 256, 128, 64}, {1024}})
    ->ArgsProduct({{16, 64, 256}, {256, 128, 64, 32}, {256}});

constexpr int64_t kHidden = 256, kWidth = 256;

void BM_PerExpertCalls(benchmark::State& state) {
  const int64_t experts = state.range(0), rows = state.range(1);
  Bench b(rows, kWidth, kHidden);
  std::mt19937 rng(1);
  std::vector<std::unique_ptr<Mlp>> mlps;
  for (int64_t e = 0; e < experts; ++e) mlps.push_back(std::make_unique<Mlp>(kWidth, kHidden, rng));
  for (auto _ : state) {
    for (const auto& m : mlps) {
      RunMlp(b.backend.get(), b.ws.get(), m->w, b.x.data(), rows, b.ws->f(Buf::kExpertOut), false);
    }
    benchmark::DoNotOptimize(b.ws->f(Buf::kExpertOut)[0]);
  }
  SetFlops(state, 6.0 * experts * rows * kWidth * kHidden);
}

void BM_OneCall(benchmark::State& state) {
  const int64_t experts = state.range(0), rows = state.range(1);
  Bench b(experts * rows, kWidth, kHidden);
  std::mt19937 rng(1);
  Mlp mlp(kWidth, kHidden, rng);
  for (auto _ : state) {
    RunMlp(b.backend.get(), b.ws.get(), mlp.w, b.x.data(), experts * rows,
           b.ws->f(Buf::kExpertOut), false);
    benchmark::DoNotOptimize(b.ws->f(Buf::kExpertOut)[0]);
  }
  SetFlops(state, 6.0 * experts * rows * kWidth * kHidden);
}
BENCHMARK(BM_PerExpertCalls)
    ->ArgNames({"experts", "rows"})
    ->ArgsProduct({{8, 32, 128}, {1, 4, 16, 64}});
BENCHMARK(BM_OneCall)->ArgNames({"experts", "rows"})->ArgsProduct({{8, 32, 128}, {1, 4, 16, 64}});

}  // namespace
}  // namespace expertd::engine::parallel

BENCHMARK_MAIN();
