// cuda_decode_benchmark: decode on the GPU for models with the real shapes of
// OLMoE-1B-7B and Qwen1.5-MoE-A2.7B (synthetic bf16 weights generated in
// memory), batch 1 and 8, in one run:
//   - the ceilings: device copy bandwidth (read + write) and pinned H2D copy
//     bandwidth, measured first;
//   - GPU-only (every expert resident): median decode step time vs the
//     memory-bandwidth floor = weight bytes the step touches (dense weights +
//     the distinct experts the batch routed to, measured) / device bandwidth;
//   - experts offloaded to pinned host memory with a device expert cache of
//     --budget of all experts, for each --prefetch mode: tokens/s, vs GPU-only,
//     stall share, hit rate, H2D bytes/s over the timed steps vs the pinned
//     peak, pack reads during the timed steps;
//   - routing skew (--skews; SkewedWeightSource: Zipf-rescaled router rows).
// Prints one markdown table; docs/cuda.md says how to run it on an H200 and
// what each column means. Needs a GPU (exits with the reason otherwise).
//
//   bazel run -c opt //engine/backend/cuda/bench:cuda_decode_benchmark -- --models=olmoe
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "engine/backend/cuda/bench/device_probes.h"
#include "engine/backend/cuda/bench/pregate_overlay.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/bench/synthetic_model.h"
#include "engine/engine.h"
#include "engine/experts/bench/skewed_weight_source.h"
#include "engine/experts/expert_store.h"
#include "engine/greedy.h"

namespace expertd::engine::cuda_bench {
namespace {

struct Options {
  std::string models = "olmoe,qwen";
  std::string batches = "1,8";
  std::string prefetch = "none,all,speculative,pregate";
  std::string skews = "0,1";
  int64_t steps = 64, warmup = 16, prompt_len = 16, routing_steps = 16, layers = 0, io_threads = 4;
  double budget = 0.25;
  uint64_t device_bytes = 100ull << 30;
  std::string pack_dir = "/tmp/expertd-cuda-bench";
  bool offload = true;
};

std::vector<std::string> List(const std::string& s) {
  return absl::StrSplit(s, ',', absl::SkipEmpty());
}

absl::StatusOr<models::zoo::ZooSpec> Spec(const std::string& name, int64_t layers) {
  models::zoo::ZooSpec s;
  s.dtype = models::DType::kBF16;
  s.seed = 7;
  s.heads = 16, s.kv_heads = 16, s.hidden = 2048;
  if (name == "olmoe") {  // OLMoE-1B-7B-0924
    s.arch = models::Architecture::kOlmoe;
    s.layers = 16, s.experts = 64, s.top_k = 8, s.moe_intermediate = 1024, s.vocab = 50304;
  } else if (name == "qwen") {  // Qwen1.5-MoE-A2.7B
    s.arch = models::Architecture::kQwen2Moe;
    s.layers = 24, s.experts = 60, s.top_k = 4, s.moe_intermediate = 1408,
    s.shared_intermediate = 5632;
    s.vocab = 151936;
  } else {
    return absl::InvalidArgumentError("--models: expected olmoe and/or qwen, got '" + name + "'");
  }
  if (layers > 0) s.layers = layers;
  return s;
}

struct Row {
  std::string model, mode;
  double skew = 0;
  int64_t batch = 0;
  double ms = 0, floor_ms = 0, resident_ms = 0;
  double stall = 0, hit = 0, h2d_gbps = 0;
  int64_t disk_reads = 0;
  double peak_gib = 0;
  bool offloaded = false;
};

// Per-step wall times (Step is synchronous: logits on the host).
struct DecodeRun {
  std::vector<double> step_ms;
  double distinct_experts = 0;  // per step, summed over MoE layers (routing pass)
  double Median() const {
    std::vector<double> s = step_ms;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0 : s[s.size() / 2];
  }
};

absl::Status DecodeStep(Engine* engine, const std::vector<SequenceId>& ids,
                        std::vector<int32_t>* next, bool routing, double* distinct) {
  StepRequest req;
  req.record_routing = routing;
  for (size_t i = 0; i < ids.size(); ++i) req.chunks.push_back(SequenceChunk{ids[i], {(*next)[i]}});
  ASSIGN_OR_RETURN(StepResult r, engine->Step(req));
  for (size_t i = 0; i < ids.size(); ++i) (*next)[i] = Argmax(r.sequences[i].logits);
  if (routing) {
    for (size_t l = 0; l < r.sequences[0].routing.size(); ++l) {
      std::set<int32_t> experts;
      for (const SequenceResult& s : r.sequences) {
        experts.insert(s.routing[l].expert_ids.begin(), s.routing[l].expert_ids.end());
      }
      *distinct += static_cast<double>(experts.size());
    }
  }
  return absl::OkStatus();
}

// Prefills `batch` prompts, decodes o.warmup untimed steps, o.steps timed
// ones and (with `routing_steps`) more steps recording routing.
absl::StatusOr<DecodeRun> Decode(Engine* engine, const Options& o, int64_t batch,
                                 int64_t routing_steps, ExpertStore* store,
                                 ExpertLayerCounters* timed) {
  const int64_t vocab = engine->config().vocab_size;
  static SequenceId next_id = 1;
  std::vector<SequenceId> ids;
  StepRequest prefill;
  for (int64_t b = 0; b < batch; ++b) {
    ids.push_back(next_id++);
    RETURN_IF_ERROR(engine->AddSequence(ids.back()));
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < o.prompt_len; ++i)
      prompt.push_back(static_cast<int32_t>((ids.back() * 7919 + i * 104729) % vocab));
    prefill.chunks.push_back(SequenceChunk{ids.back(), prompt});
  }
  ASSIGN_OR_RETURN(StepResult first, engine->Step(prefill));
  std::vector<int32_t> next;
  for (const SequenceResult& s : first.sequences) next.push_back(Argmax(s.logits));
  double unused = 0;
  for (int64_t i = 0; i < o.warmup; ++i)
    RETURN_IF_ERROR(DecodeStep(engine, ids, &next, false, &unused));
  const ExpertLayerCounters before = store ? store->stats().total : ExpertLayerCounters{};
  DecodeRun run;
  for (int64_t i = 0; i < o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(DecodeStep(engine, ids, &next, false, &unused));
    run.step_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (store != nullptr) {
    const ExpertLayerCounters after = store->stats().total;
    timed->requests = after.requests - before.requests;
    timed->hits = after.hits - before.hits;
    timed->prefetch_hits = after.prefetch_hits - before.prefetch_hits;
    timed->disk_reads = after.disk_reads - before.disk_reads;
    timed->bytes_host_to_device = after.bytes_host_to_device - before.bytes_host_to_device;
    timed->stall_ns = after.stall_ns - before.stall_ns;
  }
  for (int64_t i = 0; i < routing_steps; ++i)
    RETURN_IF_ERROR(DecodeStep(engine, ids, &next, true, &run.distinct_experts));
  if (routing_steps > 0) run.distinct_experts /= static_cast<double>(routing_steps);
  for (SequenceId id : ids) RETURN_IF_ERROR(engine->RemoveSequence(id));
  return run;
}

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(std::shared_ptr<const WeightSource> weights,
                                                   const Options& o,
                                                   const ExpertStoreOptions* store_options,
                                                   ExpertStore** store) {
  EngineOptions eo;
  eo.backend.name = "cuda";
  eo.backend.device_memory_limit = o.device_bytes;
  eo.kv_cache_bytes = 1ull << 30;
  eo.max_step_tokens = 8 * o.prompt_len;
  if (store_options != nullptr) {
    ExpertStoreOptions so = *store_options;
    eo.expert_provider_factory =
        [so, store](
            const ExpertProviderContext& ctx) -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
      ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> s, ExpertStore::Create(ctx, so));
      *store = s.get();
      return std::unique_ptr<ExpertProvider>(std::move(s));
    };
  }
  return Engine::Create(std::move(weights), eo);
}

double PeakGiB(Engine* engine) {
  return engine->backend()->memory_stats().device_bytes_peak / double(1ull << 30);
}

absl::Status RunModel(const std::string& name, const Options& o, const Ceilings& ceil,
                      std::vector<Row>* rows) {
  ASSIGN_OR_RETURN(models::zoo::ZooSpec spec, Spec(name, o.layers));
  std::cerr << "generating synthetic " << name << " weights (" << spec.layers << " layers)\n";
  ASSIGN_OR_RETURN(std::shared_ptr<InMemoryWeightSource> base, SyntheticWeights(spec));
  const models::ModelConfig& c = base->config();
  const uint64_t expert_bytes = 3ull * c.hidden_size * c.moe_intermediate_size * 2;
  const uint64_t dense_bytes =
      DecodeBytesTouched(c, models::DType::kBF16) -
      static_cast<uint64_t>(c.num_moe_layers() * c.num_experts_per_tok) * expert_bytes;
  const int64_t total_experts = c.num_moe_layers() * c.num_experts;
  for (const std::string& skew_text : List(o.skews)) {
    double skew = 0;
    if (!absl::SimpleAtod(skew_text, &skew))
      return absl::InvalidArgumentError("--skews: bad number " + skew_text);
    std::shared_ptr<const WeightSource> source = base;
    if (skew > 0) source = std::make_shared<SkewedWeightSource>(base, skew, 11);
    source = std::make_shared<PregateOverlay>(source);
    std::vector<double> resident_ms;
    {
      ExpertStore* none = nullptr;
      ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, MakeEngine(source, o, nullptr, &none));
      for (const std::string& b : List(o.batches)) {
        int64_t batch = 0;
        if (!absl::SimpleAtoi(b, &batch) || batch < 1 || batch > 8)
          return absl::InvalidArgumentError("--batches: 1..8");
        ASSIGN_OR_RETURN(DecodeRun run,
                         Decode(engine.get(), o, batch, o.routing_steps, nullptr, nullptr));
        Row r{name, "gpu-only", skew, batch, run.Median()};
        r.floor_ms =
            (dense_bytes + run.distinct_experts * expert_bytes) / (ceil.d2d_gbps * 1e9) * 1e3;
        r.resident_ms = r.ms;
        r.peak_gib = PeakGiB(engine.get());
        resident_ms.push_back(r.ms);
        rows->push_back(r);
      }
    }
    if (!o.offload) continue;
    for (const std::string& mode : List(o.prefetch)) {
      ExpertStoreOptions so;
      if (!ParsePrefetchKind(mode, &so.prefetch))
        return absl::InvalidArgumentError("--prefetch: bad mode " + mode);
      so.device_cache_experts =
          std::max<int64_t>(2, static_cast<int64_t>(o.budget * total_experts));
      so.host_cache_bytes =
          static_cast<uint64_t>(total_experts + 1) * (expert_bytes + (1 << 20));  // all, pinned
      so.pack_dir = o.pack_dir + "/" + name;
      so.io_threads = static_cast<int>(o.io_threads);
      ExpertStore* store = nullptr;
      std::cerr << "offloaded " << name << " skew " << skew << " prefetch " << mode << "\n";
      ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, MakeEngine(source, o, &so, &store));
      size_t bi = 0;
      for (const std::string& b : List(o.batches)) {
        int64_t batch = 0;
        absl::SimpleAtoi(b, &batch);
        ExpertLayerCounters timed;
        ASSIGN_OR_RETURN(DecodeRun run, Decode(engine.get(), o, batch, 0, store, &timed));
        Row r{name, "offload/" + mode, skew, batch, run.Median()};
        r.offloaded = true;
        r.resident_ms = resident_ms[bi++];
        double seconds = 0;
        for (double ms : run.step_ms) seconds += ms * 1e-3;
        r.stall = seconds > 0 ? timed.stall_ns * 1e-9 / seconds : 0;
        r.hit = timed.requests ? double(timed.hits + timed.prefetch_hits) / timed.requests : 0;
        r.h2d_gbps = seconds > 0 ? timed.bytes_host_to_device / seconds / 1e9 : 0;
        r.disk_reads = timed.disk_reads;
        r.peak_gib = PeakGiB(engine.get());
        rows->push_back(r);
      }
    }
  }
  return absl::OkStatus();
}

void Print(const std::vector<Row>& rows, const Ceilings& ceil, const std::string& device) {
  std::printf("\ndevice: %s; device copy %.0f GB/s (read+write), pinned H2D %.1f GB/s\n\n",
              device.c_str(), ceil.d2d_gbps, ceil.h2d_pinned_gbps);
  std::printf(
      "| model | skew | batch | mode | ms/step | tok/s | floor ms | x floor | vs GPU-only | stall "
      "| hit | "
      "H2D GB/s | H2D/peak | pack reads | peak GiB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double tps = r.batch * 1e3 / r.ms;
    if (!r.offloaded) {
      std::printf(
          "| %s | %.1f | %lld | %s | %.3f | %.1f | %.3f | %.2f | 1.00 | - | - | - | - | - | %.1f "
          "|\n",
          r.model.c_str(), r.skew, static_cast<long long>(r.batch), r.mode.c_str(), r.ms, tps,
          r.floor_ms, r.ms / r.floor_ms, r.peak_gib);
    } else {
      std::printf(
          "| %s | %.1f | %lld | %s | %.3f | %.1f | - | - | %.2f | %.0f%% | %.0f%% | %.1f | %.0f%% "
          "| %lld | %.1f |\n",
          r.model.c_str(), r.skew, static_cast<long long>(r.batch), r.mode.c_str(), r.ms, tps,
          r.resident_ms / r.ms, r.stall * 100, r.hit * 100, r.h2d_gbps,
          100 * r.h2d_gbps / ceil.h2d_pinned_gbps, static_cast<long long>(r.disk_reads),
          r.peak_gib);
    }
  }
}

int Main(int argc, char** argv) {
  Options o;
  FlagSet flags(
      "cuda_decode_benchmark [flags]: GPU decode vs the bandwidth floor, resident and offloaded");
  flags.String("models", &o.models,
               "comma list: olmoe (OLMoE-1B-7B shapes), qwen (Qwen1.5-MoE-A2.7B shapes)");
  flags.String("batches", &o.batches, "decode batch sizes (1..8)");
  flags.String("prefetch", &o.prefetch, "offloaded runs: none, all, speculative, pregate");
  flags.String("skews", &o.skews, "routing skews (0 = the random model's own routing)");
  flags.Int("steps", &o.steps, 1, 100000, "timed decode steps per configuration");
  flags.Int("warmup", &o.warmup, 0, 100000, "untimed decode steps first");
  flags.Int("prompt_len", &o.prompt_len, 1, 4096, "prompt tokens per sequence");
  flags.Int("routing_steps", &o.routing_steps, 0, 100000,
            "steps recording routing (for the floor)");
  flags.Int("layers", &o.layers, 0, 1024, "override the layer count (0 = the real model's)");
  flags.Int("io_threads", &o.io_threads, 1, 64, "expert store transfer workers");
  flags.Double("budget", &o.budget, 0.0, 1.0, "device expert cache, fraction of all experts");
  flags.ByteSize("device_bytes", &o.device_bytes, "the CUDA backend's arena");
  flags.String("pack_dir", &o.pack_dir, "where expert packs are written (one per model)");
  flags.Bool("offload", &o.offload, "also run the offloaded configurations");
  absl::Status s = flags.Parse(argc, argv, nullptr);
  if (!s.ok() || flags.help_requested()) {
    if (!s.ok()) std::cerr << s << "\n";
    std::cerr << flags.Usage();
    return s.ok() ? 0 : 2;
  }
  if (absl::Status gpu = CudaDeviceAvailable(); !gpu.ok()) {
    std::cerr << "cuda_decode_benchmark needs a GPU: " << gpu << "\n";
    return 1;
  }
  auto ceil = MeasureCeilings();
  if (!ceil.ok()) {
    std::cerr << ceil.status() << "\n";
    return 1;
  }
  std::string device;
  {
    auto probe = CudaBackend::Create(CudaBackendOptions{0, 256ull << 20});
    if (probe.ok()) device = (*probe)->device_name();
  }
  std::vector<Row> rows;
  for (const std::string& m : List(o.models)) {
    s = RunModel(m, o, *ceil, &rows);
    if (!s.ok()) {
      std::cerr << m << ": " << s << "\n";
      Print(rows, *ceil, device);
      return 1;
    }
  }
  Print(rows, *ceil, device);
  return 0;
}

}  // namespace
}  // namespace expertd::engine::cuda_bench

int main(int argc, char** argv) { return expertd::engine::cuda_bench::Main(argc, argv); }
