#include "engine/parallel/rank_threads.h"

#include <atomic>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace expertd::engine::parallel {
namespace {

TEST(RankThreads, RunsEveryRankOncePerRunOnStableThreads) {
  RankThreads threads(4);
  std::vector<std::thread::id> first(4);
  for (int round = 0; round < 100; ++round) {
    std::vector<std::atomic<int>> calls(4);
    std::vector<absl::Status> status = threads.Run([&](int rank) {
      calls[rank]++;
      if (round == 0) first[rank] = std::this_thread::get_id();
      if (first[rank] != std::this_thread::get_id())
        return absl::InternalError("rank moved thread");
      return rank == 2 && round == 7 ? absl::UnavailableError("rank 2 failed") : absl::OkStatus();
    });
    ASSERT_EQ(status.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(calls[r].load(), 1);
      EXPECT_EQ(status[r].ok(), !(r == 2 && round == 7)) << status[r];
    }
  }
  EXPECT_EQ(first[0], std::this_thread::get_id());
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 4u);
}

TEST(RankThreads, RanksRunConcurrently) {
  // Every rank waits (with a deadline) for all to have started: only true
  // concurrency passes.
  RankThreads threads(3);
  absl::Mutex mu;
  int started = 0;
  std::vector<absl::Status> status = threads.Run([&](int) {
    absl::MutexLock lock(&mu);
    ++started;
    auto all = [&] { return started == 3; };
    if (!mu.AwaitWithTimeout(absl::Condition(&all), absl::Seconds(30))) {
      return absl::DeadlineExceededError("ranks did not run concurrently");
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : status) EXPECT_TRUE(s.ok()) << s;
}

TEST(RankThreads, OneRankIsTheCaller) {
  RankThreads threads(1);
  std::vector<absl::Status> status = threads.Run(
      [](int rank) { return rank == 0 ? absl::OkStatus() : absl::InternalError("no such rank"); });
  ASSERT_EQ(status.size(), 1u);
  EXPECT_TRUE(status[0].ok());
}

}  // namespace
}  // namespace expertd::engine::parallel
