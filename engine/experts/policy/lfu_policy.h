// LFU with aging: evicts the resident expert with the lowest decayed access
// count, ties to the least recent. History survives eviction (a returning hot
// expert is ranked by its whole decayed history); a prefetched expert that is
// never used gains nothing.
#ifndef EXPERTD_ENGINE_EXPERTS_POLICY_LFU_POLICY_H_
#define EXPERTD_ENGINE_EXPERTS_POLICY_LFU_POLICY_H_

#include "engine/experts/policy/decayed_counter.h"
#include "engine/experts/policy/eviction_policy.h"

namespace expertd::engine {

class LfuPolicy final : public EvictionPolicy {
 public:
  // REQUIRES: half_life > 0 (ticks).
  explicit LfuPolicy(double half_life) : counts_(half_life) {}
  const char* name() const override { return "lfu"; }
  const DecayedCounter& counts() const { return counts_; }

 protected:
  Rank RankOnInsert(ExpertKey key, uint64_t tick) override {
    return Rank{counts_.Score(key), tick};
  }
  Rank RankOnTouch(ExpertKey key, uint64_t tick) override {
    const double factor = counts_.Add(key, tick);
    if (factor != 1) RescaleScores(factor);
    return Rank{counts_.Score(key), tick};
  }

 private:
  DecayedCounter counts_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_POLICY_LFU_POLICY_H_
