// Belady's replacement over an access sequence: evict, among the ids that may
// go, the one whose next use lies furthest ahead. With the whole future known
// this is the minimum number of misses (Belady 1966; Mattson et al. 1970),
// which the unit test checks against brute force. A training step's expert
// order (step_access_plan.h) is known only up to the layers whose router has
// run (later layers are predicted as every expert), so the SSD tier's
// evictions are Belady over the future as known then, not the offline optimum.
//
// Thread safety: an AccessSequence is immutable after construction.
#ifndef EXPERTD_ENGINE_TRAIN_BELADY_H_
#define EXPERTD_ENGINE_TRAIN_BELADY_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

namespace expertd::train {

// The ids in the order they will be used (an id may repeat), with an index of
// each id's positions for next-use queries in O(log n).
class AccessSequence {
 public:
  static constexpr size_t kNever = std::numeric_limits<size_t>::max();

  AccessSequence() = default;
  explicit AccessSequence(std::vector<int> ids);

  const std::vector<int>& ids() const { return ids_; }
  size_t size() const { return ids_.size(); }
  // The first position >= `from` where `id` is used; kNever if none.
  size_t NextUse(int id, size_t from) const;

 private:
  std::vector<int> ids_;
  std::map<int, std::vector<size_t>> positions_;  // ascending, per id
};

// Of `candidates` (non-empty), the one whose next use at or after `from` is
// furthest ahead (never used again counts as furthest; ties: the first).
int BeladyVictim(const AccessSequence& seq, size_t from, const std::vector<int>& candidates);

// Misses of a cache of `capacity` (>= 1) ids serving `seq` in order, starting
// empty: with Belady eviction, with LRU eviction, and the true optimum found
// by exhaustive search over every eviction choice (exponential: for tests on
// short sequences only).
int64_t CountMissesBelady(const std::vector<int>& seq, size_t capacity);
int64_t CountMissesLru(const std::vector<int>& seq, size_t capacity);
int64_t CountMissesBruteForce(const std::vector<int>& seq, size_t capacity);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_BELADY_H_
