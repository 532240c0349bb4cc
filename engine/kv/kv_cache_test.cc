#include "engine/kv/kv_cache.h"

#include <set>

#include "engine/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

KvCacheOptions Options(int64_t blocks) {
  KvCacheOptions o;
  o.num_layers = 2;
  o.k_width = 8;
  o.v_width = 8;
  o.block_size = 4;
  o.budget_bytes = blocks * 2 * 4 * 16 * sizeof(float);
  return o;
}

TEST(KvCacheTest, BudgetSetsBlockCountAndTooSmallIsAnError) {
  CpuBackend backend(CpuBackendOptions{1, 0});
  auto kv = KvCache::Create(&backend, Options(5));
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ((*kv)->stats().blocks_total, 5);
  EXPECT_EQ((*kv)->bytes_per_block(), 2 * 4 * 16 * 4);
  KvCacheOptions tiny = Options(0);
  EXPECT_EQ(KvCache::Create(&backend, tiny).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCacheTest, ReserveCommitRollbackAndRemoveAccountBlocks) {
  CpuBackend backend(CpuBackendOptions{1, 0});
  auto kv_or = KvCache::Create(&backend, Options(4));
  ASSERT_TRUE(kv_or.ok());
  KvCache& kv = **kv_or;
  ASSERT_TRUE(kv.AddSequence(1).ok());
  ASSERT_TRUE(kv.AddSequence(2).ok());
  EXPECT_EQ(kv.AddSequence(1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*kv.BlocksNeeded(1, 5), 2);
  ASSERT_TRUE(kv.Reserve(1, 5).ok());
  kv.Commit(1, 5);
  EXPECT_EQ(*kv.Length(1), 5);
  EXPECT_EQ(kv.stats().blocks_free, 2);
  EXPECT_EQ(*kv.BlocksNeeded(1, 3), 0);  // fits in the second block
  // Sequence 2 wants 3 blocks: all or nothing.
  EXPECT_EQ(kv.Reserve(2, 9).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.stats().blocks_free, 2);
  ASSERT_TRUE(kv.Reserve(2, 8).ok());
  EXPECT_EQ(kv.stats().blocks_free, 0);
  kv.Rollback(2);  // never committed: both blocks return
  EXPECT_EQ(kv.stats().blocks_free, 2);
  // Slots of distinct positions are distinct and inside the pool.
  std::set<int64_t> slots;
  for (int64_t p = 0; p < 5; ++p) slots.insert(kv.Slot(1, p));
  EXPECT_EQ(slots.size(), 5u);
  ASSERT_TRUE(kv.RemoveSequence(1).ok());
  EXPECT_EQ(kv.stats().blocks_free, 4);
  EXPECT_EQ(kv.stats().sequences, 1);
  EXPECT_EQ(kv.RemoveSequence(1).code(), absl::StatusCode::kNotFound);
}

TEST(KvCacheTest, PoolsOfLayersDoNotOverlap) {
  CpuBackend backend(CpuBackendOptions{1, 0});
  auto kv = KvCache::Create(&backend, Options(3));
  ASSERT_TRUE(kv.ok());
  const int64_t slots = 3 * 4;
  EXPECT_EQ((*kv)->v_pool(0), (*kv)->k_pool(0) + slots * 8);
  EXPECT_EQ((*kv)->k_pool(1), (*kv)->v_pool(0) + slots * 8);
}

}  // namespace
}  // namespace expertd::engine
