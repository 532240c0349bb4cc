#include "engine/experts/trace/cache_sim.h"

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "engine/experts/trace/routing_trace.h"
#include "engine/experts/trace/synthetic_trace.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

std::vector<ExpertKey> Seq(const std::vector<int>& ids) {
  std::vector<ExpertKey> out;
  for (int id : ids) out.push_back(ExpertKey{0, id});
  return out;
}

CacheSimOptions Opts(PolicyKind kind, int64_t capacity) {
  CacheSimOptions o;
  o.capacity = capacity;
  o.policy.kind = kind;
  o.policy.lfu_half_life = 1e12;  // plain LFU unless a test says otherwise
  return o;
}

// Silberschatz's reference string, 3 frames: OPT 9 faults, LRU 12 faults.
const std::vector<int> kTextbook = {7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1};

TEST(CacheSimTest, TextbookBeladyAndLru) {
  auto seq = Seq(kTextbook);
  CacheSimResult opt = SimulateBelady(seq, 3);
  EXPECT_EQ(opt.misses(), 9);
  EXPECT_EQ(opt.distinct, 6);
  CacheSimResult lru = SimulatePolicy(seq, Opts(PolicyKind::kLru, 3));
  EXPECT_EQ(lru.misses(), 12);
  EXPECT_EQ(lru.accesses, 20);
}

TEST(CacheSimTest, HandComputedLfuKeepsTheFrequentKey) {
  // Capacity 2. A is used 3 times, then B and C alternate: LFU keeps A and
  // thrashes the second slot; LRU evicts A at the first C.
  auto seq = Seq({0, 0, 0, 1, 2, 1, 2, 0});
  // LFU: A miss, hit, hit (A=3); B miss; C miss evicts B (1 < 3); B miss
  // evicts C (1 < 3), B=2; C miss evicts B (2 < 3); A hit. 3 hits.
  CacheSimResult lfu = SimulatePolicy(seq, Opts(PolicyKind::kLfu, 2));
  EXPECT_EQ(lfu.hits, 3);
  // LRU: A,A,A (2 hits), B miss, C miss evicts A, B hit, C hit, A miss.
  CacheSimResult lru = SimulatePolicy(seq, Opts(PolicyKind::kLru, 2));
  EXPECT_EQ(lru.hits, 4);
  // MIN: 2 hits on A, then B, C miss (C evicts B? next uses: A at 7, B at 5 ->
  // evicts A), B hit, C hit, A miss: 4 hits.
  EXPECT_EQ(SimulateBelady(seq, 2).hits, 4);
}

TEST(CacheSimTest, NextUses) {
  auto next = NextUses(Seq({1, 2, 1, 1, 3}));
  EXPECT_EQ(next, (std::vector<size_t>{2, 5, 3, 5, 5}));
}

// The best hit count over every possible eviction choice (exhaustive).
int64_t BruteForceOptimum(const std::vector<ExpertKey>& seq, size_t capacity) {
  std::function<int64_t(size_t, std::set<ExpertKey>)> go =
      [&](size_t i, std::set<ExpertKey> cache) -> int64_t {
    if (i == seq.size()) return 0;
    if (cache.count(seq[i])) return 1 + go(i + 1, cache);
    if (cache.size() < capacity) {
      cache.insert(seq[i]);
      return go(i + 1, cache);
    }
    int64_t best = 0;
    for (const ExpertKey& victim : cache) {
      std::set<ExpertKey> c = cache;
      c.erase(victim);
      c.insert(seq[i]);
      best = std::max(best, go(i + 1, c));
    }
    return best;
  };
  return go(0, {});
}

TEST(CacheSimTest, BeladyIsExactlyOptimalAndBoundsPolicies) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<int> ids(3 + rng() % 10);
    for (int& id : ids) id = static_cast<int>(rng() % 5);
    auto seq = Seq(ids);
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 3);
    const int64_t opt = SimulateBelady(seq, capacity).hits;
    ASSERT_EQ(opt, BruteForceOptimum(seq, capacity)) << "trial " << trial;
    EXPECT_LE(SimulatePolicy(seq, Opts(PolicyKind::kLru, capacity)).hits, opt);
    EXPECT_LE(SimulatePolicy(seq, Opts(PolicyKind::kLfu, capacity)).hits, opt);
  }
}

TEST(CacheSimTest, CapacityHoldingEverythingOnlyMissesCold) {
  SyntheticTraceOptions o;
  o.num_layers = 3;
  o.num_experts = 8;
  o.top_k = 2;
  o.steps = 50;
  auto seq = TraceAccesses(GenerateSyntheticTrace(o));
  for (PolicyKind kind : {PolicyKind::kLru, PolicyKind::kLfu}) {
    CacheSimResult r = SimulatePolicy(seq, Opts(kind, 24));
    EXPECT_EQ(r.misses(), r.distinct);
  }
  EXPECT_EQ(SimulateBelady(seq, 24).misses(), SimulateBelady(seq, 24).distinct);
}

TEST(CacheSimTest, HotPinningNeverExceedsCapacityAndHelpsOnSkew) {
  SyntheticTraceOptions o;
  o.num_layers = 4;
  o.num_experts = 16;
  o.top_k = 2;
  o.steps = 400;
  o.zipf_s = 1.2;
  auto trace = GenerateSyntheticTrace(o);
  auto seq = TraceAccesses(trace);
  CacheSimOptions pinned = Opts(PolicyKind::kLru, 16);
  pinned.pin_hot_fraction = 0.25;
  pinned.num_experts = 16;
  pinned.pin_refresh_accesses = 64;
  CacheSimResult with = SimulatePolicy(seq, pinned);
  CacheSimResult without = SimulatePolicy(seq, Opts(PolicyKind::kLru, 16));
  EXPECT_EQ(with.policy, "lru+pin0.25");
  EXPECT_GT(with.hit_rate(), without.hit_rate());
  EXPECT_LE(with.hits, SimulateBelady(seq, 16).hits);
}

}  // namespace
}  // namespace expertd::engine
