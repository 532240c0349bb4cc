// DecayedCounter: per-expert access counts with exponential decay on logical
// time. An access at tick t adds weight 2^((t - base) / half_life), so older
// accesses weigh relatively less without touching every counter each tick; the
// decayed value of a count at tick t is score * 2^(-(t - base) / half_life).
// When weights grow past 2^kMaxExponent, every score is rescaled (the base
// moves to the current tick) and the caller learns the factor.
//
// Thread safety: none.
#ifndef EXPERTD_ENGINE_EXPERTS_POLICY_DECAYED_COUNTER_H_
#define EXPERTD_ENGINE_EXPERTS_POLICY_DECAYED_COUNTER_H_

#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "engine/experts/expert_key.h"

namespace expertd::engine {

class DecayedCounter {
 public:
  static constexpr double kMaxExponent = 256;

  // REQUIRES: half_life > 0 (in ticks).
  explicit DecayedCounter(double half_life) : half_life_(half_life) {}

  // Adds one access at `tick` (non-decreasing across calls). Returns the
  // factor every stored score was multiplied by (1 unless a rescale happened,
  // which is applied before this access is added).
  double Add(ExpertKey key, uint64_t tick) {
    double exponent = (static_cast<double>(tick) - static_cast<double>(base_tick_)) / half_life_;
    double factor = 1;
    if (exponent > kMaxExponent) {
      factor = std::exp2(-exponent);
      for (auto& kv : scores_) kv.second *= factor;
      base_tick_ = tick;
      exponent = 0;
    }
    scores_[key] += std::exp2(exponent);
    return factor;
  }

  // Score in the current (undecayed) units; 0 for a key never seen. Scores of
  // different keys compare correctly at any one moment.
  double Score(ExpertKey key) const {
    auto it = scores_.find(key);
    return it == scores_.end() ? 0 : it->second;
  }

  // The decayed count at `tick`: roughly "accesses in the last half_life".
  double DecayedAt(ExpertKey key, uint64_t tick) const {
    return Score(key) *
           std::exp2(-(static_cast<double>(tick) - static_cast<double>(base_tick_)) / half_life_);
  }

  double half_life() const { return half_life_; }

 private:
  double half_life_;
  uint64_t base_tick_ = 0;
  std::unordered_map<ExpertKey, double, ExpertKeyHash> scores_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_POLICY_DECAYED_COUNTER_H_
