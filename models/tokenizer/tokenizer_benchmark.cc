// Encode throughput (MB/s) on ~1 MB of mixed text (testdata::BenchmarkText),
// for comparison with tools/oracle/bench.js (HF tokenizers through Node).
//
//   bazel run //models/tokenizer:tokenizer_benchmark   (.bazelrc builds with -O2)
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/testdata_util.h"
#include "models/tokenizer/tokenizer.h"

namespace expertd::models {
namespace {

constexpr size_t kTextBytes = 1 << 20;

const std::string& Text() {
  static const std::string* text = new std::string(testdata::BenchmarkText(kTextBytes).value());
  return *text;
}

// Warm: the tokenizer (and its word cache) is reused across iterations, as in
// a server and as in the HF benchmark.
void BM_Encode(benchmark::State& state, const std::string& name) {
  auto tok = testdata::Load(name);
  if (!tok.ok()) {
    state.SkipWithError(std::string(tok.status().message()).c_str());
    return;
  }
  size_t ids = 0;
  for (auto _ : state) {
    auto out = (*tok)->Encode(Text(), false);
    ids = out->size();
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
  state.counters["tokens"] = static_cast<double>(ids);
}

// The same text cut at line ends into ~4 KB requests (tools/oracle/bench.js
// does the same), encoded one after another.
void BM_EncodeChunks(benchmark::State& state, const std::string& name) {
  auto tok = testdata::Load(name);
  std::vector<std::string> parts(1);
  for (char c : Text()) {
    parts.back().push_back(c);
    if (c == '\n' && parts.back().size() >= 4096) parts.emplace_back();
  }
  for (auto _ : state) {
    for (const std::string& p : parts) benchmark::DoNotOptimize((*tok)->Encode(p, false));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
  state.counters["requests"] = static_cast<double>(parts.size());
}

// Cold: a fresh tokenizer (empty word cache) for every timed encode.
void BM_EncodeCold(benchmark::State& state, const std::string& name) {
  for (auto _ : state) {
    state.PauseTiming();
    auto tok = testdata::Load(name);
    state.ResumeTiming();
    auto out = (*tok)->Encode(Text(), false);
    benchmark::DoNotOptimize(out);
    state.PauseTiming();
    tok->reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  auto tok = testdata::Load(name);
  auto ids = (*tok)->Encode(Text(), false).value();
  for (auto _ : state) {
    auto text = (*tok)->Decode(ids, false);
    benchmark::DoNotOptimize(text);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
}

// The Llama-3 pre-tokenizer regex alone.
void BM_Llama3Regex(benchmark::State& state) {
  auto re = Regex::Compile(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  std::vector<std::pair<size_t, size_t>> m;
  for (auto _ : state) {
    m.clear();
    (*re)->FindAll(Text(), &m);
    benchmark::DoNotOptimize(m);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Text().size()));
  state.counters["pieces"] = static_cast<double>(m.size());
}
BENCHMARK(BM_Llama3Regex)->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(BM_Encode, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, llama2, std::string("llama2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, deepseek_v3, std::string("deepseek_v3"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeChunks, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeChunks, llama2, std::string("llama2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeCold, llama3, std::string("llama3"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_EncodeCold, llama2, std::string("llama2"))
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK_CAPTURE(BM_Decode, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, llama2, std::string("llama2"))->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace expertd::models

BENCHMARK_MAIN();
