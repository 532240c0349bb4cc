// Synthetic routing traces for the simulator, tests and benchmarks: tokens
// choose top_k distinct experts per layer with Zipf-skewed popularity (a
// per-layer random permutation decides which experts are popular), optionally
// "sticky" (a token repeats the previous step's choice with some probability,
// the temporal locality real decoders show). Deterministic for a seed.
#ifndef EXPERTD_ENGINE_EXPERTS_TRACE_SYNTHETIC_TRACE_H_
#define EXPERTD_ENGINE_EXPERTS_TRACE_SYNTHETIC_TRACE_H_

#include <cstdint>
#include <vector>

#include "engine/experts/trace/routing_trace.h"

namespace expertd::engine {

struct SyntheticTraceOptions {
  int32_t num_layers = 4;
  std::vector<bool> is_moe_layer;  // empty = every layer is MoE
  int32_t num_experts = 8;
  int32_t top_k = 2;
  int64_t steps = 100;
  int32_t tokens_per_step = 1;
  double zipf_s = 0;      // 0 = uniform; popularity of rank r ~ 1 / (r+1)^s
  double stickiness = 0;  // probability a token reuses its previous choice
  uint64_t expert_bytes = 0;
  uint64_t seed = 1;
};

RoutingTrace GenerateSyntheticTrace(const SyntheticTraceOptions& options);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_TRACE_SYNTHETIC_TRACE_H_
