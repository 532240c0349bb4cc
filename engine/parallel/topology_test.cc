#include "engine/parallel/topology.h"

#include "gtest/gtest.h"

namespace expertd::engine::parallel {
namespace {

// Shard arithmetic is constexpr: checked at compile time.
static_assert(EvenShard(10, 4, 0).begin == 0 && EvenShard(10, 4, 0).size() == 3);
static_assert(EvenShard(10, 4, 1).begin == 3 && EvenShard(10, 4, 1).size() == 3);
static_assert(EvenShard(10, 4, 2).begin == 6 && EvenShard(10, 4, 2).size() == 2);
static_assert(EvenShard(10, 4, 3).end == 10);
static_assert(ParallelTopology().world_size() == 1 && ParallelTopology().is_leader());

TEST(ParallelTopology, GettersOfATwoNodeLayout) {
  absl::StatusOr<ParallelTopology> t = ParallelTopology::Create(16, 11, 8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->world_size(), 16);
  EXPECT_EQ(t->rank(), 11);
  EXPECT_EQ(t->num_nodes(), 2);
  EXPECT_EQ(t->node_rank(), 1);
  EXPECT_EQ(t->local_rank(), 3);
  EXPECT_FALSE(t->is_leader());
  EXPECT_TRUE(t->is_multi_node());
  EXPECT_EQ(t->WithRank(0).node_rank(), 0);
  EXPECT_EQ(t->WithRank(0), *ParallelTopology::Create(16, 0, 8));
  EXPECT_NE(t->WithRank(0), *t);
  EXPECT_EQ(t->DebugString(), "rank 11/16 (node 1/2, local 3/8)");
}

TEST(ParallelTopology, RejectsInconsistentLayouts) {
  EXPECT_EQ(ParallelTopology::Create(0, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParallelTopology::Create(4, 4, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParallelTopology::Create(4, -1, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParallelTopology::Create(6, 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParallelTopology::Create(4, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParallelTopology::SingleNode(3, 2).ok());
}

TEST(EvenShard, CoversEverythingOnceForAnySplit) {
  for (int64_t total : {0, 1, 5, 7, 64, 1407}) {
    for (int parts = 1; parts <= 9; ++parts) {
      int64_t next = 0, smallest = total, largest = 0;
      for (int i = 0; i < parts; ++i) {
        const ShardRange s = EvenShard(total, parts, i);
        EXPECT_EQ(s.begin, next);
        next = s.end;
        smallest = std::min(smallest, s.size());
        largest = std::max(largest, s.size());
      }
      EXPECT_EQ(next, total);
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

}  // namespace
}  // namespace expertd::engine::parallel
