#include "engine/train/belady.h"

#include <algorithm>
#include <list>
#include <set>

namespace expertd::train {

AccessSequence::AccessSequence(std::vector<int> ids) : ids_(std::move(ids)) {
  for (size_t i = 0; i < ids_.size(); ++i) positions_[ids_[i]].push_back(i);
}

size_t AccessSequence::NextUse(int id, size_t from) const {
  auto it = positions_.find(id);
  if (it == positions_.end()) return kNever;
  auto pos = std::lower_bound(it->second.begin(), it->second.end(), from);
  return pos == it->second.end() ? kNever : *pos;
}

int BeladyVictim(const AccessSequence& seq, size_t from, const std::vector<int>& candidates) {
  int victim = candidates.front();
  size_t furthest = seq.NextUse(victim, from);
  for (int id : candidates) {
    const size_t next = seq.NextUse(id, from);  // kNever is the largest
    if (next > furthest) {
      victim = id;
      furthest = next;
    }
  }
  return victim;
}

int64_t CountMissesBelady(const std::vector<int>& seq, size_t capacity) {
  const AccessSequence s(seq);
  std::vector<int> cached;
  int64_t misses = 0;
  for (size_t i = 0; i < seq.size(); ++i) {
    if (std::find(cached.begin(), cached.end(), seq[i]) != cached.end()) continue;
    ++misses;
    if (cached.size() == capacity) {
      const int victim = BeladyVictim(s, i + 1, cached);
      cached.erase(std::find(cached.begin(), cached.end(), victim));
    }
    cached.push_back(seq[i]);
  }
  return misses;
}

int64_t CountMissesLru(const std::vector<int>& seq, size_t capacity) {
  std::list<int> recent;  // most recent first
  int64_t misses = 0;
  for (int id : seq) {
    auto it = std::find(recent.begin(), recent.end(), id);
    if (it != recent.end()) {
      recent.erase(it);
    } else {
      ++misses;
      if (recent.size() == capacity) recent.pop_back();
    }
    recent.push_front(id);
  }
  return misses;
}

namespace {

int64_t BruteForceFrom(const std::vector<int>& seq, size_t i, size_t capacity,
                       const std::set<int>& cached) {
  for (; i < seq.size() && cached.count(seq[i]); ++i) {
  }
  if (i == seq.size()) return 0;
  std::set<int> next = cached;
  if (next.size() < capacity) {
    next.insert(seq[i]);
    return 1 + BruteForceFrom(seq, i + 1, capacity, next);
  }
  int64_t best = std::numeric_limits<int64_t>::max();
  for (int victim : cached) {  // every possible eviction
    next = cached;
    next.erase(victim);
    next.insert(seq[i]);
    best = std::min(best, 1 + BruteForceFrom(seq, i + 1, capacity, next));
  }
  return best;
}

}  // namespace

int64_t CountMissesBruteForce(const std::vector<int>& seq, size_t capacity) {
  return BruteForceFrom(seq, 0, capacity, {});
}

}  // namespace expertd::train
