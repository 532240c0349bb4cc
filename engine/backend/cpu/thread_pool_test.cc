#include "engine/backend/cpu/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 20; ++rep) {
        pool.ParallelFor(n, 3, [&](int64_t b, int64_t e) {
          EXPECT_LT(b, e);
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 20) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, GrainLimitsTheNumberOfRanges) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.ParallelFor(10, 10, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
    calls++;
  });
  EXPECT_EQ(calls.load(), 1);
}

// Jobs back to back, and jobs after the workers have gone to sleep (the
// caller busy past their spin), and jobs whose worker chunks outlast the
// caller's spin (the caller sleeps): every start and end handshake, with
// every index covered once per job.
TEST(ThreadPoolTest, JobsAcrossSleepsAndWakes) {
  ThreadPool pool(3);
  constexpr int64_t kN = 64;
  std::vector<std::atomic<int>> hits(kN);
  auto busy = [](int64_t iterations) {
    volatile double v = 1.0;
    for (int64_t i = 0; i < iterations; ++i) v = v * 1.0000001 + 1e-9;
  };
  const std::thread::id caller = std::this_thread::get_id();
  for (int job = 0; job < 300; ++job) {
    const bool slow_workers = job % 3 == 1;
    pool.ParallelFor(kN, 1, [&](int64_t b, int64_t e) {
      if (slow_workers && std::this_thread::get_id() != caller) busy(200000);
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    if (job % 3 == 2) busy(2000000);  // long enough for idle workers to sleep
  }
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hits[i].load(), 300) << "i=" << i;
}

}  // namespace
}  // namespace expertd::engine
