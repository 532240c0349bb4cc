#include "engine/experts/bench/offload_workload.h"

#include <chrono>
#include <random>

#include "base/status_macros.h"
#include "engine/greedy.h"

namespace expertd::engine {

std::vector<std::vector<int32_t>> MakePrompts(int64_t count, int64_t length, int64_t vocab,
                                              uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out(count);
  for (auto& p : out) {
    for (int64_t i = 0; i < length; ++i) p.push_back(static_cast<int32_t>(rng() % vocab));
  }
  return out;
}

ExpertLayerCounters Minus(const ExpertLayerCounters& a, const ExpertLayerCounters& b) {
  ExpertLayerCounters d = a;
  ExpertLayerCounters neg;
  neg.requests = -b.requests;
  neg.hits = -b.hits;
  neg.prefetch_hits = -b.prefetch_hits;
  neg.misses = -b.misses;
  neg.host_hits = -b.host_hits;
  neg.disk_reads = -b.disk_reads;
  neg.prefetch_issued = -b.prefetch_issued;
  neg.prefetch_used = -b.prefetch_used;
  neg.prefetch_wasted = -b.prefetch_wasted;
  neg.predicted = -b.predicted;
  neg.predicted_correct = -b.predicted_correct;
  neg.predicted_requests = -b.predicted_requests;
  neg.evictions = -b.evictions;
  neg.bytes_disk_to_host = -b.bytes_disk_to_host;  // unsigned wrap-around adds back correctly
  neg.bytes_host_to_device = -b.bytes_host_to_device;
  neg.stall_ns = -b.stall_ns;
  d.Add(neg);
  return d;
}

namespace {

using Clock = std::chrono::steady_clock;

// One group of prompts: prefill together, then decode `generate` steps.
// With `timed` false (warm-up) nothing is added to `out`.
absl::Status RunGroup(Engine* engine, const std::vector<std::vector<int32_t>>& prompts,
                      size_t begin, size_t end, int64_t generate, ExpertStore* store, bool timed,
                      WorkloadResult* out) {
  StepRequest prefill;
  for (size_t i = begin; i < end; ++i) {
    RETURN_IF_ERROR(engine->AddSequence(i));
    prefill.chunks.push_back(SequenceChunk{i, prompts[i]});
  }
  ASSIGN_OR_RETURN(StepResult r, engine->Step(prefill));
  const ExpertLayerCounters before = store ? store->stats().total : ExpertLayerCounters{};
  const auto t0 = Clock::now();
  for (int64_t step = 0; step < generate; ++step) {
    StepRequest decode;
    for (const SequenceResult& s : r.sequences)
      decode.chunks.push_back(SequenceChunk{s.id, {Argmax(s.logits)}});
    ASSIGN_OR_RETURN(r, engine->Step(decode));
    if (timed) out->decode_tokens += static_cast<int64_t>(decode.chunks.size());
  }
  if (timed) {
    out->decode_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (store != nullptr) out->decode.Add(Minus(store->stats().total, before));
  }
  for (size_t i = begin; i < end; ++i) RETURN_IF_ERROR(engine->RemoveSequence(i));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkloadResult> RunWorkload(std::shared_ptr<const WeightSource> weights,
                                           const Workload& w,
                                           const ExpertStoreOptions* store_options) {
  EngineOptions eo;
  eo.backend.threads = w.threads;
  ExpertStore* store = nullptr;
  if (store_options != nullptr) {
    ExpertStoreOptions so = *store_options;
    eo.expert_provider_factory =
        [so, &store](
            const ExpertProviderContext& ctx) -> absl::StatusOr<std::unique_ptr<ExpertProvider>> {
      ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> s, ExpertStore::Create(ctx, so));
      store = s.get();
      return std::unique_ptr<ExpertProvider>(std::move(s));
    };
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(std::move(weights), eo));
  WorkloadResult out;
  out.offloaded = store != nullptr;
  const size_t batch = static_cast<size_t>(std::max<int64_t>(1, w.batch));
  if (w.warmup && !w.prompts.empty()) {
    RETURN_IF_ERROR(RunGroup(engine.get(), w.prompts, 0, std::min(w.prompts.size(), batch),
                             w.generate, store,
                             /*timed=*/false, &out));
  }
  for (size_t begin = 0; begin < w.prompts.size(); begin += batch) {
    const size_t end = std::min(w.prompts.size(), begin + batch);
    RETURN_IF_ERROR(
        RunGroup(engine.get(), w.prompts, begin, end, w.generate, store, /*timed=*/true, &out));
  }
  if (store != nullptr) out.all = store->stats();
  return out;
}

}  // namespace expertd::engine
