// Decode ms/token with routed experts stored as bf16 / int8 / int4 / mxfp4 /
// fp8 (--expert_dtype), resident and offloaded, on the CPU backend, against
// the memory-traffic floor of the bytes each token actually reads.
//
// Model (--shape): "olmoe", OLMoE-1B-7B's layer shapes (hidden 2048, 64
// experts of width 1024, top-8, vocab 50304), or "qwen3_30b_a3b",
// Qwen3-30B-A3B's (hidden 2048, 128 experts of width 768, top-8, 32 q / 4 kv
// heads of 128, vocab 151936; zoo preset qwen3_30b_a3b_2l); --vocab
// overrides the vocabulary, --layers the depth; random bf16 weights in
// memory. The experts go through the ExpertStore, which builds one pack per
// shape and format under --pack_dir (quantized when built). Modes: "resident" (the cache holds every
// expert) and "offloaded" (the device cache holds --budget of the experts, a
// host tier holds all of them, so every miss is a host -> device copy of the
// stored bytes, no disk).
//
// Floor: bytes read per token / the best streaming-read bandwidth measured in
// the run (before each round and after the last). Bytes read = the non-expert weights a token touches (bf16) + top_k x
// layers x stored expert bytes (values + scales) + 2 x the bytes copied host
// -> device during the timed steps per token (a copy reads and writes them).
// --prefill=128,512 also times those prompts' prefill (resident; tokens/s of
// the faster of 2). The machine is shared: rounds alternate the formats (A/B/C/D, A/B/C/D, ...)
// and each row reports the median step of every round.
//
//   bazel build -c opt //engine/bench:quant_decode_benchmark
//   nice -n 19 bazel-bin/engine/bench/quant_decode_benchmark --rounds=3
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/backend/cpu/cpu_features.h"
#include "engine/backend/cpu/host_buffer.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/bench/synthetic_model.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/greedy.h"

namespace expertd::engine {
namespace {

struct Options {
  int64_t layers = 2, threads = 2, steps = 24, rounds = 3;
  int64_t vocab = 0;  // 0: the shape's real vocabulary
  std::string shape = "olmoe";
  std::string prefill;  // prompt lengths, e.g. "128,512": also time their prefill
  std::string matmul_activations = "fp32";
  double budget = 0.25;
  std::string formats = "bf16,int8,int4,mxfp4,fp8", pack_dir = "/tmp/expertd-quant-bench";
};

// A model shape the benchmark builds: a zoo preset, its architecture and the
// real model's vocabulary (zoo presets keep the zoo tokenizer's 2048).
struct Shape {
  const char* name;   // --shape
  const char* title;  // the printed table's
  const char* preset;
  models::Architecture arch;
  int64_t vocab;
};
constexpr Shape kShapes[] = {
    {"olmoe", "OLMoE-1B-7B", "olmoe_1b7b_4l", models::Architecture::kOlmoe, 50304},
    {"qwen3_30b_a3b", "Qwen3-30B-A3B", "qwen3_30b_a3b_2l", models::Architecture::kQwen3Moe,
     151936},
};
const Shape* FindShape(const std::string& name) {
  for (const Shape& s : kShapes) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

// Streaming-read bandwidth (GB/s) over a 256 MiB array, best of 3, from the
// CPU backend's allocator (huge pages, as the weights it reads).
double ReadBandwidth(int threads) {
  const int64_t n = 64ll << 20;
  const cpu::HostBuffer buffer = cpu::MakeHostBuffer(n * 4);
  float* a = reinterpret_cast<float*>(buffer.get());
  ThreadPool pool(threads);
  pool.ParallelFor(n / 8, 1, [&](int64_t s, int64_t e) {
    for (int64_t i = s * 8; i < e * 8; ++i) a[i] = 1.0f;
  });
  std::vector<float> sums(threads * 16 + 16, 0.0f);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(n / 16, 1024, [&](int64_t s, int64_t e) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      for (int64_t i = s; i < e; ++i) {
        acc0 = _mm256_add_ps(acc0, _mm256_load_ps(a + i * 16));
        acc1 = _mm256_add_ps(acc1, _mm256_load_ps(a + i * 16 + 8));
      }
      alignas(32) float out[8];
      _mm256_store_ps(out, _mm256_add_ps(acc0, acc1));
      sums[(s * threads / (n / 16)) * 16] += out[0];
    });
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return n * 4.0 / best / 1e9;
}

struct Sample {
  std::vector<double> prefill_tokens_per_s;  // per --prefill length (min time of 2)
  double ms = 0;           // median decode step, after a warm-up that caches every expert
  double bytes_read = 0;   // per token
  uint64_t slot_bytes = 0; // stored bytes per expert (slot)
  int64_t warm = 0;        // experts cached (resident) / in the host tier (offloaded)
  int64_t total = 0;       // routed experts of the model
};

absl::StatusOr<Sample> Measure(std::shared_ptr<InMemoryWeightSource> w, const Options& o,
                               const std::string& dtype, bool offloaded) {
  const models::ModelConfig& c = w->config();
  const int64_t total = c.num_moe_layers() * c.num_experts;
  ExpertStoreOptions so;
  // "int4-g128": --expert_dtype=int4 --expert_group_size=128.
  const std::vector<std::string> parts = absl::StrSplit(dtype, "-g");
  int32_t group = 0;
  if (parts.size() == 2 && !absl::SimpleAtoi(parts[1], &group)) {
    return absl::InvalidArgumentError("format '" + dtype + "': expected DTYPE or DTYPE-gGROUP");
  }
  ASSIGN_OR_RETURN(so.storage, ParseExpertStorage(parts[0], group));
  so.pack_dir = o.pack_dir + "/" + o.shape + "/" + dtype;
  if (offloaded) {
    so.device_cache_experts = std::max<int64_t>(2, static_cast<int64_t>(o.budget * total));
    so.host_cache_bytes = ~0ull >> 1;  // every expert (capped at the total)
  }
  ExpertStore* store = nullptr;
  EngineOptions eo;
  eo.backend.threads = static_cast<int>(o.threads);
  if (!ParseMatmulActivations(o.matmul_activations, &eo.backend.matmul_activations)) {
    return absl::InvalidArgumentError("--matmul_activations: expected fp32, bf16 or int8");
  }
  eo.kv_cache_bytes = 256ull << 20;
  eo.expert_provider_factory =
      [&](const ExpertProviderContext& ctx) -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
    ASSIGN_OR_RETURN(auto s, ExpertStore::Create(ctx, so));
    store = s.get();
    return std::unique_ptr<ExpertProvider>(std::move(s));
  };
  ASSIGN_OR_RETURN(auto engine, Engine::Create(w, eo));
  std::vector<int32_t> prompt = {11, 2027, 305, 9, 4000, 77, 123, 50000};
  for (int32_t& id : prompt) id %= static_cast<int32_t>(c.vocab_size);
  // Warm-up: a throwaway 512-token prompt routes to (nearly) every expert, so
  // the resident mode's cache and the offloaded mode's host tier hold them all
  // before timing; without it the first few dozen timed steps read experts
  // from the pack and the median measured that, not decode. The loop below
  // repeats until nothing is left to page (checked by counts, not by time).
  {
    std::vector<int32_t> warm(512);
    for (size_t i = 0; i < warm.size(); ++i) {
      warm[i] = static_cast<int32_t>((i * 104729 + 7) % c.vocab_size);
    }
    const int64_t want = total;
    for (int rep = 0; rep < 8; ++rep) {
      const SequenceId id = 2000 + rep;
      RETURN_IF_ERROR(engine->AddSequence(id));
      RETURN_IF_ERROR(engine->Step(StepRequest{{SequenceChunk{id, warm}}}).status());
      RETURN_IF_ERROR(engine->RemoveSequence(id));
      const ExpertStoreStats st = store->stats();
      if ((offloaded ? st.host_resident : st.device_resident) >= want) break;
      for (int32_t& t : warm) t = static_cast<int32_t>((t * 31 + 17) % c.vocab_size);
    }
  }
  RETURN_IF_ERROR(engine->AddSequence(1));
  ASSIGN_OR_RETURN(StepResult r, engine->Step(StepRequest{{SequenceChunk{1, prompt}}}));
  int32_t next = Argmax(r.sequences[0].logits);
  for (int i = 0; i < 4; ++i) {  // warm-up: first touches, the host tier fills
    ASSIGN_OR_RETURN(r, engine->Step(StepRequest{{SequenceChunk{1, {next}}}}));
    next = Argmax(r.sequences[0].logits);
  }
  Sample s;
  const std::string lengths = offloaded ? "" : o.prefill;
  for (absl::string_view len : absl::StrSplit(lengths, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(len, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prefill: expected prompt lengths, got '", len, "'"));
    }
    std::vector<int32_t> long_prompt(n);
    for (int64_t i = 0; i < n; ++i) {
      long_prompt[i] = static_cast<int32_t>((i * 7919 + 13) % c.vocab_size);
    }
    double best = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      const SequenceId id = 1000 + rep;
      RETURN_IF_ERROR(engine->AddSequence(id));
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(engine->Step(StepRequest{{SequenceChunk{id, long_prompt}}}).status());
      best = std::min(
          best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      RETURN_IF_ERROR(engine->RemoveSequence(id));
    }
    s.prefill_tokens_per_s.push_back(n / best);
  }
  const ExpertStoreStats before = store->stats();
  std::vector<double> ms;
  for (int64_t i = 0; i < o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(r, engine->Step(StepRequest{{SequenceChunk{1, {next}}}}));
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count());
    next = Argmax(r.sequences[0].logits);
  }
  const ExpertStoreStats after = store->stats();
  s.warm = offloaded ? after.host_resident : after.device_resident;
  s.total = total;
  std::sort(ms.begin(), ms.end());
  s.ms = ms[ms.size() / 2];
  s.slot_bytes = after.slot_bytes;
  const double bf16_expert = 3.0 * c.hidden_size * c.moe_intermediate_size * 2;
  const double non_expert = static_cast<double>(DecodeBytesTouched(c, models::DType::kBF16)) -
                            c.num_moe_layers() * c.num_experts_per_tok * bf16_expert;
  const double copied = static_cast<double>(after.total.bytes_host_to_device -
                                            before.total.bytes_host_to_device) /
                        o.steps;
  s.bytes_read = non_expert +
                 c.num_moe_layers() * c.num_experts_per_tok * static_cast<double>(after.expert_bytes) +
                 2 * copied;
  return s;
}

int Main(int argc, char** argv) {
  Options o;
  FlagSet f("quant_decode_benchmark: decode ms/token per expert storage format");
  f.String("shape", &o.shape,
           "model shape: olmoe (OLMoE-1B-7B) | qwen3_30b_a3b (Qwen3-30B-A3B), its layers' widths");
  f.Int("layers", &o.layers, 1, 16, "decoder layers");
  f.Int("vocab", &o.vocab, 0, 1 << 20,
        "vocabulary (0: the real model's, 50304 / 151936; 2048: the zoo's checkpoint, as the "
        "llama.cpp peer runs it)");
  f.Int("threads", &o.threads, 1, 256, "CPU threads");
  f.String("matmul_activations", &o.matmul_activations, kMatmulActivationsHelp);
  f.Int("steps", &o.steps, 4, 100000, "timed decode steps per measurement");
  f.Int("rounds", &o.rounds, 1, 100, "alternating rounds over the formats");
  f.Double("budget", &o.budget, 0.01, 1, "offloaded device cache, fraction of all experts");
  f.String("formats", &o.formats,
           "--expert_dtype values to compare; DTYPE-gG sets --expert_group_size=G");
  f.String("prefill", &o.prefill,
           "prompt lengths (e.g. 128,512) whose prefill tokens/s to time too (resident only)");
  f.String("pack_dir", &o.pack_dir, "where the packs are built (one sub-directory per format)");
  absl::Status st = f.Parse(argc, argv, nullptr);
  if (!st.ok() || f.help_requested()) {
    std::fprintf(stderr, "%s\n%s", st.ToString().c_str(), f.Usage().c_str());
    return st.ok() ? 0 : 2;
  }
  const Shape* shape = FindShape(o.shape);
  if (shape == nullptr) {
    std::fprintf(stderr, "--shape: expected olmoe or qwen3_30b_a3b, got '%s'\n", o.shape.c_str());
    return 2;
  }
  if (o.vocab != 0 && o.vocab < 259) {  // 3 special tokens + 256 bytes, as the zoo's
    std::fprintf(stderr, "--vocab: expected 0 or at least 259, got %lld\n",
                 static_cast<long long>(o.vocab));
    return 2;
  }
  log::SetMinLevel(log::Level::kWarn);
  auto spec = models::zoo::PresetSpec(shape->preset, shape->arch);
  spec->vocab = o.vocab != 0 ? o.vocab : shape->vocab;
  spec->layers = o.layers;
  spec->dtype = models::DType::kBF16;
  spec->seed = 7;
  auto weights = SyntheticWeights(*spec);
  if (!weights.ok()) {
    std::fprintf(stderr, "%s\n", weights.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::string> formats = absl::StrSplit(o.formats, ',', absl::SkipEmpty());
  struct Cell {
    double ms, bytes_read;
    std::vector<double> prefill;
  };
  std::map<std::string, std::vector<Cell>> cells;  // row -> per-round results
  std::map<std::string, uint64_t> slot_bytes;
  // The floor divides by the best streaming-read bandwidth seen anywhere in
  // the run (measured before every round and once after the last): on a VM
  // one reading can come out at half the machine's rate, and a low reading
  // would flatter every ratio of its round.
  std::vector<double> bandwidths;
  for (int64_t round = 0; round < o.rounds; ++round) {
    bandwidths.push_back(ReadBandwidth(static_cast<int>(o.threads)));
    for (const std::string& dtype : formats) {
      for (bool offloaded : {false, true}) {
        auto s = Measure(*weights, o, dtype, offloaded);
        if (!s.ok()) {
          std::fprintf(stderr, "%s: %s\n", dtype.c_str(), s.status().ToString().c_str());
          return 1;
        }
        const std::string row = dtype + (offloaded ? " | offloaded" : " | resident");
        slot_bytes[dtype] = s->slot_bytes;
        cells[row].push_back(Cell{s->ms, s->bytes_read, s->prefill_tokens_per_s});
        std::fprintf(stderr, "round %lld %s: %.2f ms, %.0f MB read, %lld of %lld experts warm\n",
                     static_cast<long long>(round), row.c_str(), s->ms, s->bytes_read / 1e6,
                     static_cast<long long>(s->warm), static_cast<long long>(s->total));
      }
    }
  }
  bandwidths.push_back(ReadBandwidth(static_cast<int>(o.threads)));
  const double bw = *std::max_element(bandwidths.begin(), bandwidths.end());
  std::vector<std::string> bw_text;
  for (double b : bandwidths) bw_text.push_back(absl::StrFormat("%.1f", b));
  absl::PrintF("%s shapes, %d layers, vocab %d, %d threads, ISA %s, offloaded = %.0f%% of "
               "experts on the device + all in the host tier\n",
               shape->title, o.layers, spec->vocab, o.threads,
               cpu::CpuIsaName(cpu::BestCpuIsa()), 100 * o.budget);
  absl::PrintF("read bandwidth GB/s (each round, then the end): %s; floors use the best, %.1f\n\n",
               absl::StrJoin(bw_text, " / "), bw);
  absl::PrintF("| experts | mode | bytes / expert | MB read / token | per round: ms/token (x floor) |\n");
  absl::PrintF("|---|---|---|---|---|\n");
  for (const std::string& dtype : formats) {
    for (const char* mode : {" | resident", " | offloaded"}) {
      const std::vector<Cell>& row = cells[dtype + mode];
      std::vector<std::string> text;
      for (const Cell& c : row) {
        const double floor_ms = c.bytes_read / (bw * 1e9) * 1e3;
        std::string t = absl::StrFormat("%.1f (**%.2fx**)", c.ms, c.ms / floor_ms);
        for (double tps : c.prefill) absl::StrAppendFormat(&t, ", prefill %.0f tok/s", tps);
        text.push_back(t);
      }
      absl::PrintF("| %s%s | %d | %.0f | %s |\n", dtype, mode, slot_bytes[dtype],
                   row.empty() ? 0.0 : row.front().bytes_read / 1e6, absl::StrJoin(text, "; "));
    }
  }
  return 0;
}

}  // namespace
}  // namespace expertd::engine

int main(int argc, char** argv) { return expertd::engine::Main(argc, argv); }
