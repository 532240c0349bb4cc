// Offline expert-cache simulation: replays a demand access sequence (see
// TraceAccesses) through a policy and counts hits, for a cache holding
// `capacity` experts. Every miss inserts (no bypass), as the ExpertStore does,
// so Belady's MIN (evict the resident key whose next use is furthest away) is
// the exact optimum our policies are judged against.
#ifndef EXPERTD_ENGINE_EXPERTS_TRACE_CACHE_SIM_H_
#define EXPERTD_ENGINE_EXPERTS_TRACE_CACHE_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/experts/expert_key.h"
#include "engine/experts/policy/eviction_policy.h"

namespace expertd::engine {

struct CacheSimResult {
  std::string policy;
  int64_t capacity = 0;
  int64_t accesses = 0;
  int64_t hits = 0;
  int64_t distinct = 0;  // compulsory misses: no policy can hit a first use

  int64_t misses() const { return accesses - hits; }
  double hit_rate() const { return accesses > 0 ? static_cast<double>(hits) / accesses : 0; }
};

struct CacheSimOptions {
  int64_t capacity = 0;  // experts; REQUIRES >= 1
  PolicyOptions policy;  // policy.capacity is filled from `capacity`
  // Static pinning of the hottest experts per layer (0 = off): every
  // `pin_refresh_accesses` accesses, the top `pin_hot_fraction` of each layer
  // by decayed count are pinned, at most capacity / 2 in all.
  double pin_hot_fraction = 0;
  int64_t pin_refresh_accesses = 256;
  int32_t num_experts = 0;  // needed when pin_hot_fraction > 0
};

CacheSimResult SimulatePolicy(const std::vector<ExpertKey>& accesses,
                              const CacheSimOptions& options);
CacheSimResult SimulateBelady(const std::vector<ExpertKey>& accesses, int64_t capacity);

// next[i] = the smallest j > i with accesses[j] == accesses[i], or
// accesses.size() when there is none.
std::vector<size_t> NextUses(const std::vector<ExpertKey>& accesses);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_TRACE_CACHE_SIM_H_
