#include <algorithm>

#include "engine/experts/policy/eviction_policy.h"
#include "engine/experts/policy/lfu_policy.h"
#include "engine/experts/policy/lru_policy.h"

namespace expertd::engine {

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(const PolicyOptions& options) {
  switch (options.kind) {
    case PolicyKind::kLru:
      return std::make_unique<LruPolicy>();
    case PolicyKind::kLfu: {
      double half_life = options.lfu_half_life;
      if (half_life <= 0) {
        half_life =
            std::max(64.0, kDefaultLfuHalfLifePerSlot * static_cast<double>(options.capacity));
      }
      return std::make_unique<LfuPolicy>(half_life);
    }
  }
  return nullptr;
}

}  // namespace expertd::engine
