#include "engine/experts/transfer_engine.h"

#include <atomic>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

// Records the order jobs ran in.
struct Log {
  absl::Mutex mu;
  std::vector<std::string> order;
  TransferEngine::Job Job(std::string name) {
    return [this, name] {
      absl::MutexLock lock(&mu);
      order.push_back(name);
      return absl::OkStatus();
    };
  }
};

TEST(TransferEngineTest, RunsJobsAndReportsStatus) {
  TransferEngine t(3);
  auto ok = t.Submit(TransferEngine::kDemand, [] { return absl::OkStatus(); });
  auto bad = t.Submit(TransferEngine::kPrefetch, [] { return absl::DataLossError("crc"); });
  EXPECT_TRUE(ok->Wait().ok());
  EXPECT_EQ(bad->Wait().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(bad->done());
  EXPECT_EQ(t.num_threads(), 3);
}

TEST(TransferEngineTest, DemandJumpsAheadOfPrefetchAndPromotionWorks) {
  TransferEngine t(1);
  Log log;
  absl::Notification gate;
  auto blocker = t.Submit(TransferEngine::kDemand, [&] {
    gate.WaitForNotification();
    return absl::OkStatus();
  });
  // Wait until the single worker is inside the blocker.
  while (t.queued() != 0) absl::SleepFor(absl::Milliseconds(1));
  auto p1 = t.Submit(TransferEngine::kPrefetch, log.Job("p1"));
  auto p2 = t.Submit(TransferEngine::kPrefetch, log.Job("p2"));
  auto p3 = t.Submit(TransferEngine::kPrefetch, log.Job("p3"));
  auto d1 = t.Submit(TransferEngine::kDemand, log.Job("d1"));
  t.Promote(p3);
  EXPECT_EQ(t.queued(), 5u);  // p3 sits in both queues until claimed
  gate.Notify();
  for (auto& c : {p1, p2, p3, d1}) ASSERT_TRUE(c->Wait().ok());
  EXPECT_EQ(log.order, (std::vector<std::string>{"d1", "p3", "p1", "p2"}));
  t.Promote(p1);  // already ran: no-op
  EXPECT_EQ(t.queued(), 0u);
}

TEST(TransferEngineTest, DestructorRunsEverythingSubmitted) {
  std::atomic<int> ran{0};
  std::vector<std::shared_ptr<TransferCompletion>> done;
  {
    TransferEngine t(2);
    for (int i = 0; i < 100; ++i) {
      done.push_back(t.Submit(i % 2 ? TransferEngine::kDemand : TransferEngine::kPrefetch, [&] {
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
