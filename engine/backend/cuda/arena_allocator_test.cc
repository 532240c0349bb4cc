#include "engine/backend/cuda/arena_allocator.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine::cuda {
namespace {

constexpr uintptr_t kBase = 1 << 20;

TEST(ArenaAllocatorTest, RoundsToAlignmentAndCoalescesBackToOneBlock) {
  ArenaAllocator a(kBase, 4096, 256);
  auto x = a.Allocate(1);
  auto y = a.Allocate(300);
  auto z = a.Allocate(0);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, kBase);
  EXPECT_EQ(*y, kBase + 256);
  EXPECT_EQ(*z, kBase + 768);
  EXPECT_EQ(a.bytes_in_use(), 1024u);
  a.Free(*y);  // a hole in the middle
  EXPECT_EQ(a.free_blocks(), 2u);
  a.Free(*x);  // merges with the hole after it
  EXPECT_EQ(a.free_blocks(), 2u);
  a.Free(*z);  // merges both sides
  EXPECT_EQ(a.free_blocks(), 1u);
  EXPECT_EQ(a.largest_free_block(), 4096u);
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(a.peak_bytes_in_use(), 1024u);
}

TEST(ArenaAllocatorTest, BestFitPicksTheSmallestHoleThatFits) {
  ArenaAllocator a(kBase, 16 * 256, 256);
  std::vector<uintptr_t> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(*a.Allocate(256));
  EXPECT_FALSE(a.Allocate(1).has_value());
  a.Free(blocks[1]);  // hole of 1
  a.Free(blocks[4]);  // hole of 3
  a.Free(blocks[5]);
  a.Free(blocks[6]);
  a.Free(blocks[9]);  // hole of 2
  a.Free(blocks[10]);
  EXPECT_EQ(*a.Allocate(512), blocks[9]);
  EXPECT_EQ(*a.Allocate(256), blocks[1]);
  EXPECT_EQ(*a.Allocate(700), blocks[4]);
  EXPECT_FALSE(a.Allocate(256).has_value());
}

TEST(ArenaAllocatorTest, FailsCleanlyWhenFullOrHuge) {
  ArenaAllocator a(kBase, 1000, 256);  // rounds down to 768
  EXPECT_EQ(a.capacity(), 768u);
  EXPECT_FALSE(a.Allocate(769).has_value());
  EXPECT_FALSE(a.Allocate(~uint64_t{0}).has_value());
  EXPECT_TRUE(a.Allocate(768).has_value());
  EXPECT_FALSE(a.Allocate(1).has_value());
}

// Random allocate/free against a model of the address space: blocks never
// overlap, stay inside the arena, and everything coalesces at the end.
TEST(ArenaAllocatorTest, RandomSequencesNeverOverlapAndFullyCoalesce) {
  std::mt19937 rng(12345);
  const uint64_t size = 1 << 20;
  ArenaAllocator a(kBase, size, 256);
  std::map<uintptr_t, uint64_t> live;  // address -> requested bytes
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t bytes = 1 + rng() % (rng() % 8 == 0 ? 65536 : 2048);
      auto p = a.Allocate(bytes);
      if (!p) continue;
      ASSERT_EQ((*p - kBase) % 256, 0u);
      ASSERT_LE(*p + bytes, kBase + size);
      auto next = live.lower_bound(*p);
      if (next != live.end()) ASSERT_LE(*p + bytes, next->first);
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, *p);
      }
      live.emplace(*p, bytes);
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      a.Free(it->first);
      live.erase(it);
    }
    ASSERT_EQ(a.live_allocations(), live.size());
  }
  for (auto& [address, bytes] : live) a.Free(address);
  EXPECT_EQ(a.free_blocks(), 1u);
  EXPECT_EQ(a.largest_free_block(), size);
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

}  // namespace
}  // namespace expertd::engine::cuda
