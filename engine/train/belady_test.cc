#include "engine/train/belady.h"

#include <random>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

TEST(AccessSequenceTest, NextUse) {
  const AccessSequence s({3, 1, 3, 2});
  EXPECT_EQ(s.NextUse(3, 0), 0u);
  EXPECT_EQ(s.NextUse(3, 1), 2u);
  EXPECT_EQ(s.NextUse(3, 3), AccessSequence::kNever);
  EXPECT_EQ(s.NextUse(7, 0), AccessSequence::kNever);
}

TEST(BeladyTest, EvictsTheFurthestNextUseAndNeverUsedFirst) {
  const AccessSequence s({1, 2, 3, 1, 2, 4});
  EXPECT_EQ(BeladyVictim(s, 3, {1, 2, 3}), 3);  // 3 is never used again
  EXPECT_EQ(BeladyVictim(s, 3, {1, 2, 4}), 4);  // 4 at 5, after 1 (3) and 2 (4)
  EXPECT_EQ(BeladyVictim(s, 6, {1, 2}), 1);     // ties (never): the first
}

// Belady is optimal: the brute-force minimum over every eviction choice, on
// many random short sequences and capacities.
TEST(BeladyTest, MatchesBruteForceOptimum) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int ids = 2 + static_cast<int>(rng() % 5);
    const size_t length = 4 + rng() % 10;
    const size_t capacity = 1 + rng() % 3;
    std::vector<int> seq(length);
    for (int& id : seq) id = static_cast<int>(rng() % ids);
    ASSERT_EQ(CountMissesBelady(seq, capacity), CountMissesBruteForce(seq, capacity))
        << "trial " << trial << " capacity " << capacity;
  }
}

// On a training step's shape (forward over layers, backward in reverse, then
// an optimizer pass) Belady misses less than LRU, and never more anywhere.
TEST(BeladyTest, BeatsLru) {
  std::vector<int> step;
  const int layers = 3, experts = 4;
  for (int l = 0; l < layers; ++l) {
    for (int e = 0; e < experts; ++e) step.push_back(l * experts + e);
  }
  for (int l = layers - 1; l >= 0; --l) {
    for (int e = 0; e < experts; ++e) step.push_back(l * experts + e);
  }
  for (int id = 0; id < layers * experts; ++id) step.push_back(id);
  for (size_t capacity : {2u, 3u, 5u, 8u, 11u}) {
    const int64_t belady = CountMissesBelady(step, capacity), lru = CountMissesLru(step, capacity);
    EXPECT_LE(belady, lru) << capacity;
    if (capacity <= 5) EXPECT_LT(belady, lru) << capacity;  // LRU's scan pathology
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> seq(30);
    for (int& id : seq) id = static_cast<int>(rng() % 8);
    const size_t capacity = 1 + rng() % 6;
    EXPECT_LE(CountMissesBelady(seq, capacity), CountMissesLru(seq, capacity));
  }
  // A cyclic scan one larger than the cache: LRU misses every access.
  const std::vector<int> cyclic = {0, 1, 2, 0, 1, 2, 0, 1, 2};
  EXPECT_EQ(CountMissesLru(cyclic, 2), 9);
  EXPECT_EQ(CountMissesBelady(cyclic, 2), 6);  // = CountMissesBruteForce
  EXPECT_EQ(CountMissesBruteForce(cyclic, 2), 6);
}

}  // namespace
}  // namespace expertd::train
