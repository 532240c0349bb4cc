// Static pinning of the hottest experts (ES-MoE keeps the top 25% of each
// layer resident): picks, per MoE layer, the experts with the highest decayed
// access counts.
#ifndef EXPERTD_ENGINE_EXPERTS_POLICY_HOT_PINS_H_
#define EXPERTD_ENGINE_EXPERTS_POLICY_HOT_PINS_H_

#include <cstdint>
#include <vector>

#include "engine/experts/expert_key.h"
#include "engine/experts/policy/decayed_counter.h"

namespace expertd::engine {

// For each layer in `layers`: the round(fraction * num_experts) experts with
// the highest count (never one with a zero count), hottest first. If that is
// more than `max_total` keys in all, layers are served round-robin by rank
// (every layer's hottest, then every layer's second, ...) until max_total.
// Ties break toward the lower expert id. Deterministic.
std::vector<ExpertKey> HottestPerLayer(const DecayedCounter& counts,
                                       const std::vector<int32_t>& layers, int32_t num_experts,
                                       double fraction, size_t max_total);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_POLICY_HOT_PINS_H_
