#include "server/tokenize_pool.h"

#include <atomic>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace expertd::server {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);  // a deadline that fails the test

TEST(TokenizePoolTest, RunsJobsOffTheCallingThread) {
  TokenizePool pool({2, 8});
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> ran{0};
  std::atomic<bool> on_caller{false};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(pool.RunAndWait([&] {
                      if (std::this_thread::get_id() == caller) on_caller = true;
                      ++ran;
                    })
                    .ok());
  }
  EXPECT_EQ(ran.load(), 8);  // RunAndWait returns after its job ran
  EXPECT_FALSE(on_caller.load());
}

TEST(TokenizePoolTest, FullQueueIsResourceExhaustedNamingTheLimits) {
  TokenizePool pool({1, 1});
  absl::Notification started, release, second_ran;
  ASSERT_TRUE(pool.Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
  ASSERT_TRUE(pool.Submit([&] { second_ran.Notify(); }).ok());  // waits for the thread
  absl::Status third = pool.Submit([] { ADD_FAILURE() << "a refused job ran"; });
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("--tokenize_queue_length=1"), absl::string_view::npos) << third;
  TokenizePool::Stats s = pool.stats();
  EXPECT_EQ(s.running, 1);
  EXPECT_EQ(s.queued, 1);
  EXPECT_EQ(s.rejected, 1);
  EXPECT_EQ(pool.RunAndWait([] {}).code(), absl::StatusCode::kResourceExhausted);
  release.Notify();
  ASSERT_TRUE(second_ran.WaitForNotificationWithTimeout(kWait));
  // Room again once the queue drained.
  EXPECT_TRUE(pool.RunAndWait([] {}).ok());
}

TEST(TokenizePoolTest, ZeroQueueTakesJobsOnlyForIdleThreads) {
  // Declared before the pool: the worker can still be inside
  // release.WaitForNotification() after Notify() returns, so `release` must
  // outlive the pool's join (ThreadSanitizer saw it destroyed under the waiter).
  absl::Notification started, release;
  TokenizePool pool({1, 0});
  ASSERT_TRUE(pool.Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
  EXPECT_EQ(pool.Submit([] {}).code(), absl::StatusCode::kResourceExhausted);
  release.Notify();
}

TEST(TokenizePoolTest, DestructorRunsEveryQueuedJob) {
  std::atomic<int> ran{0};
  absl::Notification started, release;
  {
    TokenizePool pool({1, 4});
    ASSERT_TRUE(pool.Submit([&] {
                      started.Notify();
                      release.WaitForNotification();
                    })
                    .ok());
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.Submit([&] { ++ran; }).ok());
    release.Notify();
  }  // each job finishes a call: none may be dropped
  EXPECT_EQ(ran.load(), 4);
}

}  // namespace
}  // namespace expertd::server
