#include "engine/experts/policy/eviction_policy.h"

#include <cassert>

namespace expertd::engine {

const char* PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kLru:
      return "lru";
    case PolicyKind::kLfu:
      return "lfu";
  }
  return "?";
}

bool ParsePolicyKind(absl::string_view name, PolicyKind* kind) {
  if (name == "lru") {
    *kind = PolicyKind::kLru;
  } else if (name == "lfu") {
    *kind = PolicyKind::kLfu;
  } else {
    return false;
  }
  return true;
}

void EvictionPolicy::SetRank(ExpertKey key, Entry* e, Rank rank) {
  const bool evictable = Evictable(key, *e);
  if (evictable) order_.erase({e->rank, key});
  e->rank = rank;
  if (evictable) order_.insert({e->rank, key});
}

void EvictionPolicy::Insert(ExpertKey key) {
  assert(!Contains(key));
  Entry& e = entries_[key];
  e.rank = RankOnInsert(key, ++tick_);
  if (Evictable(key, e)) order_.insert({e.rank, key});
}

void EvictionPolicy::Touch(ExpertKey key) {
  auto it = entries_.find(key);
  assert(it != entries_.end());
  // RankOnTouch may rescale (which walks entries_), so compute it first.
  const Rank rank = RankOnTouch(key, ++tick_);
  SetRank(key, &it->second, rank);
}

void EvictionPolicy::Erase(ExpertKey key) {
  auto it = entries_.find(key);
  assert(it != entries_.end() && it->second.pins == 0);
  order_.erase({it->second.rank, key});
  entries_.erase(it);
}

void EvictionPolicy::Pin(ExpertKey key) {
  auto it = entries_.find(key);
  assert(it != entries_.end());
  Entry& e = it->second;
  if (Evictable(key, e)) order_.erase({e.rank, key});
  ++e.pins;
}

void EvictionPolicy::Unpin(ExpertKey key) {
  auto it = entries_.find(key);
  assert(it != entries_.end() && it->second.pins > 0);
  Entry& e = it->second;
  --e.pins;
  if (Evictable(key, e)) order_.insert({e.rank, key});
}

int EvictionPolicy::pin_count(ExpertKey key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? 0 : it->second.pins;
}

void EvictionPolicy::SetStaticPins(const std::vector<ExpertKey>& keys) {
  // Take every resident static key out of the order, swap sets, put back.
  for (const ExpertKey& k : static_pins_) {
    auto it = entries_.find(k);
    if (it != entries_.end() && it->second.pins == 0) order_.insert({it->second.rank, k});
  }
  static_pins_.clear();
  for (const ExpertKey& k : keys) {
    if (!static_pins_.insert(k).second) continue;
    auto it = entries_.find(k);
    if (it != entries_.end() && it->second.pins == 0) order_.erase({it->second.rank, k});
  }
}

std::optional<ExpertKey> EvictionPolicy::Victim() const {
  if (order_.empty()) return std::nullopt;
  return order_.begin()->second;
}

void EvictionPolicy::RescaleScores(double factor) {
  order_.clear();
  for (auto& [key, e] : entries_) {
    e.rank.score *= factor;
    if (Evictable(key, e)) order_.insert({e.rank, key});
  }
}

}  // namespace expertd::engine
