// Per-expert GEMMs vs the grouped GEMM for a MoE layer's routed experts
// (the measurement behind the engine's choice, ChooseExpertGemm in
// engine/model/expert_gemm.h; docs/benchmarks.md "Grouped expert GEMM").
//
//  BM_ExpertGemm/widths/experts/rows/zipf/threads: the experts' SwiGLU MLPs
//    over their rows, already grouped per expert, two ways in the same
//    iteration (alternating which goes first): one RunMlp per expert with
//    rows (the per-expert path: each Matmul splits over the pool by itself)
//    and RunGroupedMlp (three GroupedMatmul calls: items over experts x row
//    tiles x column chunks). `rows` is the mean rows per expert; zipf = 0
//    gives every expert exactly `rows`, zipf = 1 draws experts x rows rows
//    from a Zipf(1.2) popularity (some experts then get none: `active`).
//    widths: 0 = Qwen3-30B-A3B (hidden 2048, expert 768, bf16),
//            1 = small (hidden 256, expert 256, fp32: shard_gemm_benchmark's),
//            2 = a Qwen3-30B-A3B expert's MoEShard slice on 4 devices (768 / 4 = 192).
//    Counters: per_expert_us, grouped_us (wall time per layer, medians over
//    the iterations), speedup = per_expert / grouped. The gather/scatter of
//    rows is left out (the grouped path does one of each where the
//    per-expert path does one per expert, so this is conservative).
//
// Wall time is what counts with several threads; on a loaded machine read
// speedup (both paths measured under the same load, interleaved).
//   tools/bazel.sh build -c opt //engine/parallel:grouped_gemm_benchmark
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/backend/backend_factory.h"
#include "engine/model/feed_forward.h"
#include "engine/model/workspace.h"
#include "models/dtype/dtype.h"

namespace expertd::engine::parallel {
namespace {

struct Widths {
  int64_t hidden, inter;
  DType dtype;
};
constexpr Widths kWidths[] = {
    {2048, 768, DType::kBF16}, {256, 256, DType::kF32}, {2048, 192, DType::kBF16}};
constexpr int64_t kMaxExperts = 256;

// kMaxExperts experts' weights of one width set, built once (the Qwen3 set
// is 2.4 GB of bf16), filled by a cheap generator: values do not matter.
class ExpertPool {
 public:
  explicit ExpertPool(const Widths& w) {
    const int64_t elems = w.hidden * w.inter;
    const int64_t bytes = elems * models::DTypeSize(w.dtype);
    data_.resize(static_cast<size_t>(kMaxExperts * 3 * bytes));
    uint32_t s = 12345;
    if (w.dtype == DType::kF32) {
      float* f = reinterpret_cast<float*>(data_.data());
      for (size_t i = 0; i < data_.size() / 4; ++i) f[i] = Next(&s);
    } else {
      uint16_t* h = reinterpret_cast<uint16_t*>(data_.data());
      for (size_t i = 0; i < data_.size() / 2; ++i) h[i] = models::F32ToBf16(Next(&s));
    }
    for (int64_t e = 0; e < kMaxExperts; ++e) {
      const uint8_t* base = data_.data() + e * 3 * bytes;
      MlpWeights m;
      m.gate = WeightRef{base, w.dtype, w.inter, w.hidden};
      m.up = WeightRef{base + bytes, w.dtype, w.inter, w.hidden};
      m.down = WeightRef{base + 2 * bytes, w.dtype, w.hidden, w.inter};
      experts_.push_back(m);
    }
  }
  const MlpWeights& expert(int64_t e) const { return experts_[e]; }

  static const ExpertPool& For(int widths) {
    static std::unique_ptr<ExpertPool> pools[3];
    if (!pools[widths]) pools[widths] = std::make_unique<ExpertPool>(kWidths[widths]);
    return *pools[widths];
  }

 private:
  static float Next(uint32_t* s) {  // xorshift32 -> [-0.05, 0.05)
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (static_cast<float>(*s >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  std::vector<uint8_t> data_;
  std::vector<MlpWeights> experts_;
};

// Rows per expert: uniform, or experts * mean rows drawn from Zipf(1.2).
std::vector<int64_t> RowsPerExpert(int64_t experts, int64_t mean, bool zipf) {
  std::vector<int64_t> rows(experts, zipf ? 0 : mean);
  if (!zipf) return rows;
  std::vector<double> p(experts);
  for (int64_t e = 0; e < experts; ++e) p[e] = 1.0 / std::pow(static_cast<double>(e + 1), 1.2);
  std::discrete_distribution<int64_t> pick(p.begin(), p.end());
  std::mt19937 rng(7);
  for (int64_t i = 0; i < experts * mean; ++i) ++rows[pick(rng)];
  return rows;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void BM_ExpertGemm(benchmark::State& state) {
  const int widths = static_cast<int>(state.range(0));
  const int64_t experts = state.range(1), mean = state.range(2);
  const bool zipf = state.range(3) != 0;
  const Widths w = kWidths[widths];
  const ExpertPool& pool = ExpertPool::For(widths);
  const std::vector<int64_t> rows = RowsPerExpert(experts, mean, zipf);
  GroupedMlp grouped;
  std::vector<int64_t> active;
  for (int64_t e = 0; e < experts; ++e) {
    if (rows[e] == 0) continue;
    grouped.Add(pool.expert(e), rows[e]);
    active.push_back(e);
  }
  const int64_t total = grouped.rows();
  BackendOptions o;
  o.threads = static_cast<int>(state.range(4));
  std::unique_ptr<Backend> be = *CreateBackend(o);
  ModelDims dims;
  dims.hidden = dims.q_width = dims.k_width = dims.v_width = w.hidden;
  dims.experts = dims.top_k = dims.vocab = 1;
  dims.max_intermediate = w.inter;
  Workspace ws(be.get(), dims);
  (void)ws.Prepare(WorkspaceDims{total, 1, 1});
  std::vector<float> x(total * w.hidden), y(total * w.hidden);
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  for (float& f : x) f = d(rng);

  auto per_expert = [&] {
    for (size_t i = 0; i < active.size(); ++i) {
      const int64_t off = grouped.row_offset[i], n = grouped.row_offset[i + 1] - off;
      RunMlp(be.get(), &ws, pool.expert(active[i]), x.data() + off * w.hidden, n,
             y.data() + off * w.hidden, false);
    }
  };
  auto one_call = [&] {
    RunGroupedMlp(be.get(), grouped, x.data(), ws.f(Buf::kGate), ws.f(Buf::kUp), y.data(), false);
  };
  auto time_us = [](const auto& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> per_us, grouped_us;
  bool grouped_first = false;
  for (auto _ : state) {
    double a, b;
    if (grouped_first) {
      b = time_us(one_call);
      a = time_us(per_expert);
    } else {
      a = time_us(per_expert);
      b = time_us(one_call);
    }
    grouped_first = !grouped_first;
    per_us.push_back(a);
    grouped_us.push_back(b);
    state.SetIterationTime((a + b) * 1e-6);
    benchmark::DoNotOptimize(y[0]);
  }
  const double pe = Median(per_us), gr = Median(grouped_us);
  state.counters["active"] = static_cast<double>(active.size());
  state.counters["total_rows"] = static_cast<double>(total);
  state.counters["per_expert_us"] = pe;
  state.counters["grouped_us"] = gr;
  state.counters["speedup"] = gr > 0 ? pe / gr : 0;
}

// Qwen3-30B-A3B widths: decode-like (1-4 rows per expert) to prefill-like
// (16-256), at most 2048 rows a layer (the run's time); 2 threads (this
// machine's cores) and 1.
void QwenArgs(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {2, 1}) {
    for (int64_t experts : {8, 32, 64, 128, 256}) {
      for (int64_t rows : {1, 2, 4, 16, 64, 256}) {
        if (experts * rows > 2048) continue;
        for (int64_t zipf : {0, 1}) b->Args({0, experts, rows, zipf, threads});
      }
    }
  }
}
void SmallArgs(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {2, 1}) {
    for (int64_t experts : {8, 32, 64, 128, 256}) {
      for (int64_t rows : {1, 2, 4, 16, 64, 256}) {
        if (experts * rows > 8192) continue;
        for (int64_t zipf : {0, 1}) b->Args({1, experts, rows, zipf, threads});
      }
    }
  }
}
// MoEShard slices: each CPU virtual device runs one thread.
void ShardArgs(benchmark::internal::Benchmark* b) {
  for (int64_t experts : {8, 32, 128}) {
    for (int64_t rows : {1, 4, 16, 64}) {
      if (experts * rows > 2048) continue;
      b->Args({2, experts, rows, 1, 1});
    }
  }
}
BENCHMARK(BM_ExpertGemm)
    ->ArgNames({"widths", "experts", "rows", "zipf", "threads"})
    ->Apply(QwenArgs)
    ->Apply(SmallArgs)
    ->Apply(ShardArgs)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace expertd::engine::parallel

BENCHMARK_MAIN();
