#include "engine/experts/policy/eviction_policy.h"

#include <memory>

#include "engine/experts/policy/decayed_counter.h"
#include "engine/experts/policy/hot_pins.h"
#include "engine/experts/policy/lfu_policy.h"
#include "engine/experts/policy/lru_policy.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

ExpertKey K(int e) { return ExpertKey{0, e}; }

TEST(LruPolicyTest, EvictsLeastRecentlyUsed) {
  LruPolicy p;
  p.Insert(K(1));
  p.Insert(K(2));
  p.Insert(K(3));
  EXPECT_EQ(*p.Victim(), K(1));
  p.Touch(K(1));
  EXPECT_EQ(*p.Victim(), K(2));
  p.Erase(K(2));
  EXPECT_EQ(*p.Victim(), K(3));
  EXPECT_EQ(p.size(), 2u);
}

TEST(LruPolicyTest, PinnedKeysAreNeverVictims) {
  LruPolicy p;
  p.Insert(K(1));
  p.Insert(K(2));
  p.Pin(K(1));
  p.Pin(K(1));  // pins nest
  EXPECT_EQ(*p.Victim(), K(2));
  p.Pin(K(2));
  EXPECT_FALSE(p.Victim().has_value());
  p.Unpin(K(1));
  EXPECT_FALSE(p.Victim().has_value());  // still pinned once
  p.Unpin(K(1));
  EXPECT_EQ(*p.Victim(), K(1));  // keeps its old recency
  EXPECT_EQ(p.evictable_size(), 1u);
}

TEST(LruPolicyTest, StaticPinsApplyWhenResidentAndCanBeReplaced) {
  LruPolicy p;
  p.SetStaticPins({K(1), K(9)});  // 9 not resident yet
  p.Insert(K(1));
  p.Insert(K(2));
  EXPECT_EQ(*p.Victim(), K(2));
  p.Insert(K(9));
  p.Erase(K(2));
  EXPECT_FALSE(p.Victim().has_value());
  p.SetStaticPins({K(9)});
  EXPECT_EQ(*p.Victim(), K(1));
  p.SetStaticPins({});
  EXPECT_EQ(*p.Victim(), K(1));
  EXPECT_EQ(p.evictable_size(), 2u);
}

TEST(LfuPolicyTest, EvictsLeastFrequentTiesToLeastRecent) {
  LfuPolicy p(/*half_life=*/1e9);  // effectively no decay
  for (int e : {1, 2, 3}) {
    p.Insert(K(e));
    p.Touch(K(e));
  }
  p.Touch(K(1));
  p.Touch(K(1));
  p.Touch(K(3));
  // counts: 1 -> 3, 2 -> 1, 3 -> 2.
  EXPECT_EQ(*p.Victim(), K(2));
  p.Erase(K(2));
  EXPECT_EQ(*p.Victim(), K(3));
  p.Insert(K(4));  // a prefetch: count 0
  EXPECT_EQ(*p.Victim(), K(4));
}

TEST(LfuPolicyTest, HistorySurvivesEviction) {
  LfuPolicy p(1e9);
  p.Insert(K(1));
  for (int i = 0; i < 5; ++i) p.Touch(K(1));
  p.Erase(K(1));
  p.Insert(K(2));
  p.Touch(K(2));
  p.Insert(K(1));  // comes back with its 5 accesses
  EXPECT_EQ(*p.Victim(), K(2));
}

TEST(LfuPolicyTest, AgingLetsYesterdaysHotExpertLeave) {
  LfuPolicy p(/*half_life=*/4);
  p.Insert(K(1));
  for (int i = 0; i < 8; ++i) p.Touch(K(1));  // hot long ago
  p.Insert(K(2));
  // 40 ticks later (10 half-lives) a few fresh accesses to 2 outweigh 1's 8.
  for (int i = 0; i < 40; ++i) p.Touch(K(2));
  EXPECT_EQ(*p.Victim(), K(1));
}

TEST(LfuPolicyTest, RescaleKeepsOrder) {
  // Half-life 1 tick: weights pass 2^256 after 256 ticks and get rescaled.
  LfuPolicy p(1);
  p.Insert(K(1));
  p.Insert(K(2));
  p.Insert(K(3));
  for (int i = 0; i < 1000; ++i) {
    p.Touch(K(1 + i % 2));
  }
  // 3 was never touched; 1 was touched less recently than 2.
  EXPECT_EQ(*p.Victim(), K(3));
  p.Erase(K(3));
  EXPECT_EQ(*p.Victim(), K(1));
}

TEST(PolicyFactoryTest, NamesRoundTrip) {
  for (PolicyKind kind : {PolicyKind::kLru, PolicyKind::kLfu}) {
    PolicyKind parsed;
    ASSERT_TRUE(ParsePolicyKind(PolicyKindName(kind), &parsed));
    EXPECT_EQ(parsed, kind);
    PolicyOptions o;
    o.kind = kind;
    o.capacity = 4;
    EXPECT_STREQ(MakeEvictionPolicy(o)->name(), PolicyKindName(kind));
  }
  PolicyKind k;
  EXPECT_FALSE(ParsePolicyKind("belady", &k));
}

TEST(DecayedCounterTest, HalvesPerHalfLife) {
  DecayedCounter c(10);
  c.Add(K(1), 0);
  EXPECT_DOUBLE_EQ(c.DecayedAt(K(1), 10), 0.5);
  EXPECT_DOUBLE_EQ(c.DecayedAt(K(1), 20), 0.25);
  c.Add(K(1), 20);
  EXPECT_DOUBLE_EQ(c.DecayedAt(K(1), 20), 1.25);
  EXPECT_EQ(c.Score(K(2)), 0);
}

TEST(HotPinsTest, TopFractionPerLayerCappedRoundRobin) {
  DecayedCounter c(1e9);
  uint64_t t = 0;
  auto add = [&](int layer, int e, int n) {
    for (int i = 0; i < n; ++i) c.Add(ExpertKey{layer, e}, t++);
  };
  add(0, 3, 5);
  add(0, 1, 4);
  add(0, 2, 1);
  add(2, 0, 7);
  add(2, 5, 2);
  // 8 experts, 25% -> 2 per layer.
  auto pins = HottestPerLayer(c, {0, 2}, 8, 0.25, 100);
  std::vector<ExpertKey> want = {{0, 3}, {2, 0}, {0, 1}, {2, 5}};
  EXPECT_EQ(pins, want);
  pins = HottestPerLayer(c, {0, 2}, 8, 0.25, 3);
  want.resize(3);
  EXPECT_EQ(pins, want);
  // Never pins an expert that was never used.
  EXPECT_EQ(HottestPerLayer(c, {2}, 8, 1.0, 100).size(), 2u);
}

}  // namespace
}  // namespace expertd::engine
