// expert_compute_benchmark: where missed experts run (--expert_compute), on a
// synthetic OLMoE-1B-7B-shaped model (zoo preset olmoe_1b7b_4l: hidden 2048,
// 64 experts of width 1024, top-8; --layers of them). The device cache holds
// --budget of the routed experts, the host tier all of them (as llama.cpp's
// --n-cpu-moe keeps them in host RAM), no prefetch. Per mode: one prompt of
// --prompt_len tokens (prefill), then --generate greedy tokens (decode); for
// each phase the measured time, the cost model's predicted and the measured
// routed-expert time, and how many missed experts ran on the host vs were
// paged. The modes run in alternation (device, host, auto, then rotated) for
// --rounds rounds on one warm engine each, and medians are printed: the machine
// is shared. Not a test: the table and command go to docs/benchmarks.md.
//
//   bazel build -c opt //engine/experts/bench:expert_compute_benchmark
//   nice bazel-bin/engine/experts/bench/expert_compute_benchmark --expert_dtype=bf16
//
// The model is generated under --model_dir (default a temporary directory,
// deleted at exit together with its expert pack).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "models/checkpoint/checkpoint.h"
#include "models/zoo/generator.h"
#include "models/zoo/zoo_spec.h"

namespace expertd::engine {
namespace {

struct Options {
  std::string model_dir;
  int64_t layers = 2, prompt_len = 128, generate = 16, rounds = 3, threads = 0;
  int64_t host_compute_threads = 0, expert_group_size = 0;
  double budget = 0.25;
  std::string expert_dtype = "bf16", modes = "device,host,auto";
};

// One phase (prefill or decode) of one run.
struct Phase {
  double seconds = 0, predicted_s = 0, measured_s = 0;
  int64_t host = 0, paged = 0, hits = 0;
};
struct Run {
  Phase prefill, decode;
};

Phase Delta(const ExpertLayerCounters& a, const ExpertLayerCounters& b, double seconds) {
  return Phase{seconds,
               (b.predicted_expert_ns - a.predicted_expert_ns) * 1e-9,
               (b.measured_expert_ns - a.measured_expert_ns) * 1e-9,
               b.host_computes - a.host_computes,
               b.misses - a.misses,
               (b.hits + b.prefetch_hits) - (a.hits + a.prefetch_hits)};
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Prefill `prompt` then decode `generate` tokens on sequence `id`.
absl::StatusOr<Run> Generate(Engine* engine, ExpertStore* store, SequenceId id,
                             const std::vector<int32_t>& prompt, int64_t generate) {
  Run run;
  RETURN_IF_ERROR(engine->AddSequence(id));
  StepRequest req;
  req.chunks.push_back({id, prompt, false});
  ExpertLayerCounters before = store->stats().total;
  double start = Now();
  ASSIGN_OR_RETURN(StepResult r, engine->Step(req));
  ExpertLayerCounters after = store->stats().total;
  run.prefill = Delta(before, after, Now() - start);
  before = after;
  start = Now();
  for (int64_t i = 0; i < generate; ++i) {
    req.chunks[0].tokens = {Argmax(r.sequences[0].logits)};
    ASSIGN_OR_RETURN(r, engine->Step(req));
  }
  run.decode = Delta(before, store->stats().total, Now() - start);
  RETURN_IF_ERROR(engine->RemoveSequence(id));
  return run;
}

struct Served {
  std::unique_ptr<Engine> engine;
  ExpertStore* store = nullptr;
};

absl::StatusOr<Served> Serve(std::shared_ptr<const models::Checkpoint> ckpt,
                             const ExpertStoreOptions& options, int threads) {
  Served s;
  EngineOptions eo;
  eo.backend.threads = threads;
  ExpertStore** slot = &s.store;
  eo.expert_provider_factory = [options, slot](const ExpertProviderContext& ctx)
      -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
    ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store, ExpertStore::Create(ctx, options));
    *slot = store.get();
    return std::unique_ptr<ExpertProvider>(std::move(store));
  };
  ASSIGN_OR_RETURN(s.engine, Engine::Create(std::move(ckpt), eo));
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void PrintMode(const std::string& mode, const std::vector<Run>& runs, const ExpertStoreStats& s,
               int64_t prompt_len, int64_t generate) {
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const Run& r : runs) v.push_back(field(r));
    return Median(v);
  };
  const Run& last = runs.back();
  absl::PrintF(
      "| %s | %.0f | %.0f | %.0f | %d / %d | %.1f | %.1f | %.1f | %.1f / %.1f |\n", mode,
      med([](const Run& r) { return r.prefill.seconds * 1e3; }),
      med([](const Run& r) { return r.prefill.predicted_s * 1e3; }),
      med([](const Run& r) { return r.prefill.measured_s * 1e3; }), last.prefill.host,
      last.prefill.paged, med([&](const Run& r) { return r.decode.seconds * 1e3 / generate; }),
      med([&](const Run& r) { return r.decode.predicted_s * 1e3 / generate; }),
      med([&](const Run& r) { return r.decode.measured_s * 1e3 / generate; }),
      static_cast<double>(last.decode.host) / generate,
      static_cast<double>(last.decode.paged) / generate);
  absl::PrintF(
      "<!-- %s rates now: page %.2f GB/s; host %.0f us + %.1f us/token; device %.0f us + %.1f "
      "us/token; prompt %d tokens -->\n",
      mode, s.page_bytes_per_s * 1e-9, s.host_fixed_s * 1e6, s.host_per_token_s * 1e6,
      s.device_fixed_s * 1e6, s.device_per_token_s * 1e6, prompt_len);
}

absl::Status Main(const Options& o) {
  const bool temporary = o.model_dir.empty();
  const std::string dir = temporary ? absl::StrFormat("/tmp/expertd-compute-bench-%d", getpid())
                                    : o.model_dir;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } cleanup{temporary ? dir : ""};
  if (!std::filesystem::exists(dir + "/config.json")) {
    ASSIGN_OR_RETURN(models::zoo::ZooSpec spec,
                     models::zoo::PresetSpec("olmoe_1b7b_4l", models::Architecture::kOlmoe));
    spec.layers = o.layers;
    spec.seed = 11;
    std::cerr << "generating " << dir << "\n";
    RETURN_IF_ERROR(models::zoo::GenerateModel(spec, dir));
  }
  ASSIGN_OR_RETURN(auto opened, models::Checkpoint::Open(dir));
  std::shared_ptr<const models::Checkpoint> ckpt(std::move(opened));
  const models::ModelConfig& c = ckpt->config();
  const int64_t total = c.num_moe_layers() * c.num_experts;
  ExpertStoreOptions base;
  base.pack_dir = dir + "/.expertd";
  ASSIGN_OR_RETURN(base.storage, ParseExpertStorage(o.expert_dtype, o.expert_group_size));
  base.device_cache_experts = std::max<int64_t>(2, static_cast<int64_t>(o.budget * total));
  base.host_cache_bytes = ~0ull >> 1;  // every expert (clamped to the expert count)
  base.prefetch = PrefetchKind::kNone;
  base.calibrate_compute = true;
  base.host_compute_threads = static_cast<int>(o.host_compute_threads);
  std::vector<std::string> modes = absl::StrSplit(o.modes, ',', absl::SkipEmpty());
  std::map<std::string, Served> served;
  for (const std::string& m : modes) {
    ExpertStoreOptions so = base;
    if (!ParseExpertComputeMode(m, &so.compute)) {
      return absl::InvalidArgumentError("--expert_compute: expected auto, device or host, got " +
                                        m);
    }
    ASSIGN_OR_RETURN(served[m], Serve(ckpt, so, static_cast<int>(o.threads)));
  }
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < o.prompt_len; ++i)
    prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % c.vocab_size));
  std::map<std::string, std::vector<Run>> runs;
  for (const std::string& m : modes) {  // warm-up: fills the host tier, the page cache
    ASSIGN_OR_RETURN(Run warm, Generate(served[m].engine.get(), served[m].store, 1, prompt, 4));
    (void)warm;
  }
  for (int64_t round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < modes.size(); ++i) {  // rotated each round: A B C, B C A, ...
      const std::string& m = modes[(i + round) % modes.size()];
      ASSIGN_OR_RETURN(Run r, Generate(served[m].engine.get(), served[m].store, 2 + round, prompt,
                                       o.generate));
      runs[m].push_back(r);
    }
  }
  const ExpertStoreStats first = served[modes[0]].store->stats();
  absl::PrintF(
      "\nOLMoE-shaped, %d MoE layers x %d experts (top-%d), %s experts of %d bytes; device cache "
      "%d experts (%.0f%%), host tier all; prompt %d tokens, %d decode tokens; %d rounds "
      "alternating, medians\n\n",
      c.num_moe_layers(), c.num_experts, c.num_experts_per_tok, first.storage, first.expert_bytes,
      first.device_slots, 100.0 * first.device_slots / total, o.prompt_len, o.generate, o.rounds);
  absl::PrintF(
      "| --expert_compute | prefill ms | experts predicted ms | experts measured ms | host / "
      "paged | decode ms/token | experts predicted ms/token | experts measured ms/token | host "
      "/ paged per token |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& m : modes)
    PrintMode(m, runs[m], served[m].store->stats(), o.prompt_len, o.generate);
  return absl::OkStatus();
}

}  // namespace
}  // namespace expertd::engine

int main(int argc, char** argv) {
  expertd::engine::Options o;
  expertd::FlagSet f("expert_compute_benchmark: missed experts paged vs computed on the host");
  f.String("model_dir", &o.model_dir, "the zoo model (generated when missing; default: temporary)");
  f.Int("layers", &o.layers, 1, 64, "decoder layers of the OLMoE-shaped model");
  f.Double("budget", &o.budget, 0, 1, "device cache, fraction of the routed experts");
  f.String("expert_dtype", &o.expert_dtype, "bf16 | f32 | int8 | int4 | mxfp4");
  f.Int("expert_group_size", &o.expert_group_size, 0, 4096, "int8 / int4 group size (0 = 32)");
  f.String("expert_compute", &o.modes, "modes to compare: any of device,host,auto");
  f.Int("host_compute_threads", &o.host_compute_threads, 0, 1024, "0 = every hardware thread");
  f.Int("threads", &o.threads, 0, 1024, "device (CPU backend) threads; 0 = every core");
  f.Int("prompt_len", &o.prompt_len, 1, 1 << 16, "prefill tokens");
  f.Int("generate", &o.generate, 1, 1 << 16, "decode tokens");
  f.Int("rounds", &o.rounds, 1, 1000, "alternating rounds");
  absl::Status s = f.Parse(argc, argv, nullptr);
  if (f.help_requested()) {
    std::cout << f.Usage();
    return 0;
  }
  expertd::log::SetMinLevel(expertd::log::Level::kWarn);
  if (s.ok()) s = expertd::engine::Main(o);
  if (!s.ok()) {
    std::cerr << "expert_compute_benchmark: " << s << "\n";
    return 1;
  }
  return 0;
}
