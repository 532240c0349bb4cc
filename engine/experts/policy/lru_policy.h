// LRU: evicts the least recently inserted-or-touched resident expert.
#ifndef EXPERTD_ENGINE_EXPERTS_POLICY_LRU_POLICY_H_
#define EXPERTD_ENGINE_EXPERTS_POLICY_LRU_POLICY_H_

#include "engine/experts/policy/eviction_policy.h"

namespace expertd::engine {

class LruPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "lru"; }

 protected:
  Rank RankOnInsert(ExpertKey, uint64_t tick) override { return Rank{0, tick}; }
  Rank RankOnTouch(ExpertKey, uint64_t tick) override { return Rank{0, tick}; }
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_POLICY_LRU_POLICY_H_
