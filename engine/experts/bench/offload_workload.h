// The offload benchmark's workload: greedy generation over a prompt set,
// `batch` sequences decoding together, on an Engine whose experts come from
// an ExpertStore (or stay resident). After an untimed warm-up pass over the
// first group (page cache, mappings, expert cache), times the decode steps and
// takes the store's counters over the timed decode steps alone and over the
// whole run (warm-up included).
#ifndef EXPERTD_ENGINE_EXPERTS_BENCH_OFFLOAD_WORKLOAD_H_
#define EXPERTD_ENGINE_EXPERTS_BENCH_OFFLOAD_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "engine/experts/expert_store.h"
#include "engine/model/weight_source.h"

namespace expertd::engine {

struct Workload {
  std::vector<std::vector<int32_t>> prompts;  // token ids
  int64_t generate = 32;                      // greedy tokens per prompt
  int64_t batch = 1;                          // prompts decoded together
  int threads = 0;                            // backend threads (0 = all cores)
  bool warmup = true;                         // run the first group once, untimed
};

// `count` prompts of `length` pseudo-random token ids in [0, vocab).
std::vector<std::vector<int32_t>> MakePrompts(int64_t count, int64_t length, int64_t vocab,
                                              uint32_t seed);

struct WorkloadResult {
  double decode_seconds = 0;
  int64_t decode_tokens = 0;   // sequences x decode steps
  ExpertLayerCounters decode;  // store counters over decode steps
  ExpertStoreStats all;        // store counters over the whole run
  bool offloaded = false;

  double tokens_per_second() const {
    return decode_seconds > 0 ? decode_tokens / decode_seconds : 0;
  }
  double stall_fraction() const {
    return decode_seconds > 0 ? decode.stall_ns * 1e-9 / decode_seconds : 0;
  }
};

// Runs the workload. With `store_options` null the experts stay resident
// (ResidentExpertProvider); otherwise an ExpertStore built from them.
absl::StatusOr<WorkloadResult> RunWorkload(std::shared_ptr<const WeightSource> weights,
                                           const Workload& workload,
                                           const ExpertStoreOptions* store_options);

// a - b, field by field.
ExpertLayerCounters Minus(const ExpertLayerCounters& a, const ExpertLayerCounters& b);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_BENCH_OFFLOAD_WORKLOAD_H_
