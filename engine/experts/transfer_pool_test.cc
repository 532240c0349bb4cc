#include "engine/experts/transfer_pool.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

// Records the order jobs ran in.
struct Log {
  absl::Mutex mu;
  std::vector<std::string> order;
  TransferPool::Job Job(std::string name) {
    return [this, name] {
      absl::MutexLock lock(&mu);
      order.push_back(name);
      return absl::OkStatus();
    };
  }
};

TEST(TransferPoolTest, RunsJobsAndReportsStatus) {
  TransferPool t(3);
  auto ok = t.Submit(TransferPool::kDemand, [] { return absl::OkStatus(); });
  auto bad = t.Submit(TransferPool::kPrefetch, [] { return absl::DataLossError("crc"); });
  EXPECT_TRUE(ok->Wait().ok());
  EXPECT_EQ(bad->Wait().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(bad->done());
  EXPECT_EQ(t.num_threads(), 3);
}

// Generous: only a wedged worker takes this long, and then the test fails
// instead of hanging.
constexpr absl::Duration kDeadline = absl::Seconds(60);

// Occupies one worker until released; `started` says the worker has popped it.
struct Blocker {
  absl::Notification started;
  absl::Notification release;
  TransferPool::Job Job() {
    return [this] {
      started.Notify();
      release.WaitForNotification();
      return absl::OkStatus();
    };
  }
};

TEST(TransferPoolTest, DemandJumpsAheadOfPrefetchAndPromotionWorks) {
  TransferPool t(1);
  Log log;
  Blocker blocker;
  auto blocked = t.Submit(TransferPool::kDemand, blocker.Job());
  ASSERT_TRUE(blocker.started.WaitForNotificationWithTimeout(kDeadline));
  EXPECT_EQ(t.queued(), 0u);  // the single worker has taken the blocker
  auto p1 = t.Submit(TransferPool::kPrefetch, log.Job("p1"));
  auto p2 = t.Submit(TransferPool::kPrefetch, log.Job("p2"));
  auto p3 = t.Submit(TransferPool::kPrefetch, log.Job("p3"));
  auto d1 = t.Submit(TransferPool::kDemand, log.Job("d1"));
  t.Promote(p3);
  EXPECT_EQ(t.queued(), 4u);  // p3 moved, not copied
  blocker.release.Notify();
  for (auto& c : {blocked, p1, p2, p3, d1}) ASSERT_TRUE(c->Wait().ok());
  EXPECT_EQ(log.order, (std::vector<std::string>{"d1", "p3", "p1", "p2"}));
  t.Promote(p1);  // already ran: no-op
  // p2 was the last job popped, so nothing (no stale promoted entry) is left.
  EXPECT_EQ(t.queued(), 0u);
}

// A promoted job is waiting once, not twice: the count a worker sees drop as
// it takes jobs must not include a stale prefetch-queue entry.
TEST(TransferPoolTest, PromotedJobIsCountedOnce) {
  TransferPool t(1);
  Log log;
  Blocker blocker;
  auto blocked = t.Submit(TransferPool::kDemand, blocker.Job());
  ASSERT_TRUE(blocker.started.WaitForNotificationWithTimeout(kDeadline));
  auto p1 = t.Submit(TransferPool::kPrefetch, log.Job("p1"));
  t.Promote(p1);
  EXPECT_EQ(t.queued(), 1u);
  t.Promote(p1);  // already a demand job: no-op
  EXPECT_EQ(t.queued(), 1u);
  blocker.release.Notify();
  ASSERT_TRUE(p1->Wait().ok());
  EXPECT_EQ(t.queued(), 0u);
  EXPECT_EQ(log.order, (std::vector<std::string>{"p1"}));
}

TEST(TransferPoolTest, DestructorRunsEverythingSubmitted) {
  std::atomic<int> ran{0};
  std::vector<std::shared_ptr<TransferCompletion>> done;
  {
    TransferPool t(2);
    for (int i = 0; i < 100; ++i) {
      done.push_back(t.Submit(i % 2 ? TransferPool::kDemand : TransferPool::kPrefetch, [&] {
        ran.fetch_add(1);
        return absl::OkStatus();
      }));
    }
  }
  EXPECT_EQ(ran.load(), 100);
  for (auto& c : done) EXPECT_TRUE(c->done());
}

}  // namespace
}  // namespace expertd::engine
