#include "engine/experts/trace/cache_sim.h"

#include <algorithm>
#include <cassert>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "engine/experts/policy/decayed_counter.h"
#include "engine/experts/policy/hot_pins.h"

namespace expertd::engine {
namespace {

int64_t CountDistinct(const std::vector<ExpertKey>& accesses) {
  std::unordered_set<ExpertKey, ExpertKeyHash> seen(accesses.begin(), accesses.end());
  return static_cast<int64_t>(seen.size());
}

std::vector<int32_t> LayersOf(const std::vector<ExpertKey>& accesses) {
  std::set<int32_t> layers;
  for (const ExpertKey& k : accesses) layers.insert(k.layer);
  return {layers.begin(), layers.end()};
}

}  // namespace

std::vector<size_t> NextUses(const std::vector<ExpertKey>& accesses) {
  std::vector<size_t> next(accesses.size(), accesses.size());
  std::unordered_map<ExpertKey, size_t, ExpertKeyHash> later;
  for (size_t i = accesses.size(); i-- > 0;) {
    auto it = later.find(accesses[i]);
    if (it != later.end()) next[i] = it->second;
    later[accesses[i]] = i;
  }
  return next;
}

CacheSimResult SimulatePolicy(const std::vector<ExpertKey>& accesses,
                              const CacheSimOptions& options) {
  assert(options.capacity >= 1);
  PolicyOptions po = options.policy;
  po.capacity = options.capacity;
  std::unique_ptr<EvictionPolicy> policy = MakeEvictionPolicy(po);
  CacheSimResult r;
  r.policy = policy->name();
  if (options.pin_hot_fraction > 0) absl::StrAppend(&r.policy, "+pin", options.pin_hot_fraction);
  r.capacity = options.capacity;
  r.accesses = static_cast<int64_t>(accesses.size());
  r.distinct = CountDistinct(accesses);

  const bool pinning = options.pin_hot_fraction > 0 && options.num_experts > 0;
  const std::vector<int32_t> layers = pinning ? LayersOf(accesses) : std::vector<int32_t>{};
  DecayedCounter hot(std::max(64.0, kDefaultLfuHalfLifePerSlot * options.capacity));
  uint64_t tick = 0;
  for (const ExpertKey& key : accesses) {
    if (pinning) {
      hot.Add(key, tick);
      if (++tick % options.pin_refresh_accesses == 0) {
        policy->SetStaticPins(HottestPerLayer(hot, layers, options.num_experts,
                                              options.pin_hot_fraction,
                                              static_cast<size_t>(options.capacity / 2)));
      }
    }
    if (policy->Contains(key)) {
      ++r.hits;
    } else {
      if (static_cast<int64_t>(policy->size()) >= options.capacity) {
        std::optional<ExpertKey> victim = policy->Victim();
        assert(victim.has_value());  // static pins never exceed capacity / 2
        policy->Erase(*victim);
      }
      policy->Insert(key);
    }
    policy->Touch(key);
  }
  return r;
}

CacheSimResult SimulateBelady(const std::vector<ExpertKey>& accesses, int64_t capacity) {
  assert(capacity >= 1);
  CacheSimResult r;
  r.policy = "belady";
  r.capacity = capacity;
  r.accesses = static_cast<int64_t>(accesses.size());
  r.distinct = CountDistinct(accesses);
  const std::vector<size_t> next = NextUses(accesses);
  std::unordered_map<ExpertKey, size_t, ExpertKeyHash> resident;  // key -> its next use
  std::set<std::pair<size_t, ExpertKey>> by_next_use;
  for (size_t i = 0; i < accesses.size(); ++i) {
    const ExpertKey key = accesses[i];
    auto it = resident.find(key);
    if (it != resident.end()) {
      ++r.hits;
      by_next_use.erase({it->second, key});
    } else if (static_cast<int64_t>(resident.size()) >= capacity) {
      auto furthest = std::prev(by_next_use.end());
      resident.erase(furthest->second);
      by_next_use.erase(furthest);
    }
    resident[key] = next[i];
    by_next_use.insert({next[i], key});
  }
  return r;
}

}  // namespace expertd::engine
