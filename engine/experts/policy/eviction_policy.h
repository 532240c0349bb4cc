// EvictionPolicy: decides which resident expert leaves a full cache.
//
// The cache (device tier or host tier) tells the policy what is resident
// (Insert / Erase), what was used (Touch) and what must stay (Pin / Unpin,
// SetStaticPins); the policy answers Victim(): the resident, unpinned,
// not-statically-pinned key to evict next. Policies run on logical time (one
// tick per Insert or Touch), so the same sequence of calls always gives the
// same decisions; there is no wall clock here.
//
//   lru: evicts the least recently inserted-or-touched key.
//   lfu: evicts the key with the lowest decayed access count (ties: least
//        recent). Counts persist across evictions (an expert evicted once
//        keeps its history) and decay exponentially: an access's weight halves
//        every `lfu_half_life` ticks, so yesterday's hot expert can leave.
//
// Pins: dynamic pins nest (a count) and mark experts in use by the current
// step or in flight; static pins (a set, replaced wholesale) mark the hottest
// experts kept resident for good (ES-MoE). Either keeps a key out of Victim().
//
// Thread safety: none; the owning cache serialises calls.
#ifndef EXPERTD_ENGINE_EXPERTS_POLICY_EVICTION_POLICY_H_
#define EXPERTD_ENGINE_EXPERTS_POLICY_EVICTION_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/experts/expert_key.h"

namespace expertd::engine {

enum class PolicyKind { kLru, kLfu };

const char* PolicyKindName(PolicyKind kind);  // "lru", "lfu"
bool ParsePolicyKind(absl::string_view name, PolicyKind* kind);

struct PolicyOptions {
  PolicyKind kind = PolicyKind::kLru;
  // LFU only: ticks after which an access's weight has halved. 0 = default
  // (kDefaultLfuHalfLifePerSlot * capacity, at least 64; tuned with
  // expert-cache-sim on skewed traces, see docs/offload.md).
  double lfu_half_life = 0;
  // Capacity of the cache in experts (used for defaults only).
  int64_t capacity = 0;
};

inline constexpr double kDefaultLfuHalfLifePerSlot = 32.0;

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual const char* name() const = 0;

  // `key` became resident. REQUIRES: !Contains(key). Not an access: a demand
  // miss is Insert then Touch; a prefetch is Insert alone.
  void Insert(ExpertKey key);
  // An access to a resident key. REQUIRES: Contains(key).
  void Touch(ExpertKey key);
  // `key` left the cache. REQUIRES: Contains(key) && pin_count(key) == 0.
  void Erase(ExpertKey key);

  // Dynamic pins (nesting). REQUIRES: Contains(key); Unpin after a Pin.
  void Pin(ExpertKey key);
  void Unpin(ExpertKey key);
  // Replaces the static pin set. Keys need not be resident; a static key is
  // kept whenever it is.
  void SetStaticPins(const std::vector<ExpertKey>& keys);

  // The next key to evict, or nullopt when every resident key is pinned.
  std::optional<ExpertKey> Victim() const;

  bool Contains(ExpertKey key) const { return entries_.count(key) > 0; }
  int pin_count(ExpertKey key) const;
  bool IsStaticPinned(ExpertKey key) const { return static_pins_.count(key) > 0; }
  size_t size() const { return entries_.size(); }
  size_t evictable_size() const { return order_.size(); }
  uint64_t tick() const { return tick_; }

 protected:
  // Lower ranks are evicted first.
  struct Rank {
    double score = 0;
    uint64_t tick = 0;
    friend bool operator<(const Rank& a, const Rank& b) {
      return a.score != b.score ? a.score < b.score : a.tick < b.tick;
    }
  };
  virtual Rank RankOnInsert(ExpertKey key, uint64_t tick) = 0;
  virtual Rank RankOnTouch(ExpertKey key, uint64_t tick) = 0;
  // Multiplies every resident rank's score by `factor` (> 0), keeping order.
  void RescaleScores(double factor);

 private:
  struct Entry {
    Rank rank;
    int pins = 0;
  };
  bool Evictable(ExpertKey key, const Entry& e) const {
    return e.pins == 0 && !IsStaticPinned(key);
  }
  void SetRank(ExpertKey key, Entry* e, Rank rank);

  uint64_t tick_ = 0;
  std::unordered_map<ExpertKey, Entry, ExpertKeyHash> entries_;  // resident keys
  std::set<std::pair<Rank, ExpertKey>> order_;                   // evictable keys
  std::unordered_set<ExpertKey, ExpertKeyHash> static_pins_;
};

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(const PolicyOptions& options);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_POLICY_EVICTION_POLICY_H_
