// Scheduler tests on FakeStepEngine: engine failures, deterministic tokens,
// KV accounting. Time comes from a FakeClock; nothing here sleeps.
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "server/fake_step_engine.h"
#include "server/scheduler.h"

namespace expertd::server {
namespace {

class Collector : public GenerationObserver {
 public:
  void OnUpdate(GenerationUpdate u) override {
    absl::MutexLock lock(&mu_);
    tokens_.insert(tokens_.end(), u.token_ids.begin(), u.token_ids.end());
    if (u.finished) {
      final_ = u;
      done_.Notify();
    }
  }
  GenerationUpdate Wait() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(60)));
    absl::MutexLock lock(&mu_);
    return final_;
  }
  std::vector<int32_t> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }

 private:
  absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  GenerationUpdate final_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

class SchedulerFakeEngineTest : public ::testing::Test {
 protected:
  void Start(SchedulerOptions so = {}) {
    so.clock = &clock_;
    so.max_context = 1000;
    scheduler_ = std::make_unique<Scheduler>(&engine_, nullptr, so, nullptr);
    scheduler_->Start();
  }
  GenerationRequest Request(int prompt_len, int max_new) {
    GenerationRequest r;
    r.request_id = "r";
    for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(i % engine_.vocab_size());
    r.max_new_tokens = max_new;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.arrival = clock_.Now();
    return r;
  }
  std::shared_ptr<Collector> Submit(GenerationRequest r) {
    auto c = std::make_shared<Collector>();
    auto h = scheduler_->Submit(std::move(r), c);
    EXPECT_TRUE(h.ok()) << h.status();
    return c;
  }
  // The greedy tokens the fake engine gives a prompt of `prompt_len`.
  std::vector<int32_t> Expected(int prompt_len, int n) {
    std::vector<int32_t> out;
    for (int k = 0; k < n; ++k) out.push_back(engine_.NextToken(prompt_len - 1 + k));
    return out;
  }

  FakeClock clock_;
  FakeStepEngine engine_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerFakeEngineTest, GeneratesTheEnginesTokensAndFreesTheKvCache) {
  Start();
  auto c = Submit(Request(5, 6));
  GenerationUpdate f = c->Wait();
  EXPECT_TRUE(f.status.ok());
  EXPECT_EQ(f.finish_reason, FinishReason::kLength);
  EXPECT_EQ(c->tokens(), Expected(5, 6));
  EXPECT_EQ(engine_.sequences(), 0);
  EXPECT_EQ(engine_.kv_cache_stats().blocks_free, engine_.kv_cache_stats().blocks_total);
}

// A failing step ends the requests in it with an error naming the cause; the
// scheduler keeps serving: a later request completes normally.
TEST_F(SchedulerFakeEngineTest, FailingStepEndsItsRequestsWithAnErrorAndServingGoesOn) {
  engine_.FailStep(3, absl::InternalError("device lost"));
  Start();
  auto a = Submit(Request(4, 20));
  GenerationUpdate f = a->Wait();
  EXPECT_TRUE(f.status.ok());  // a generation error, reported in the stream
  EXPECT_EQ(f.finish_reason, FinishReason::kError);
  EXPECT_EQ(f.error_message, "engine step failed: device lost");
  EXPECT_EQ(a->tokens(), Expected(4, 2));  // steps 1 and 2 gave tokens
  EXPECT_EQ(f.completion_tokens, 2);
  EXPECT_EQ(engine_.sequences(), 0);  // removed from the engine

  auto b = Submit(Request(3, 5));
  GenerationUpdate g = b->Wait();
  EXPECT_TRUE(g.status.ok());
  EXPECT_EQ(g.finish_reason, FinishReason::kLength);
  EXPECT_EQ(b->tokens(), Expected(3, 5));
  EXPECT_EQ(engine_.sequences(), 0);
  EXPECT_EQ(engine_.kv_cache_stats().blocks_free, engine_.kv_cache_stats().blocks_total);
}

// Only the requests in the failed step fail: one still waiting for admission
// (max_running = 1) runs afterwards.
TEST_F(SchedulerFakeEngineTest, RequestsOutsideTheFailedStepAreUnaffected) {
  SchedulerOptions so;
  so.max_running = 1;
  engine_.FailStep(2, absl::InternalError("device lost"));
  Start(so);
  auto a = Submit(Request(4, 10));
  auto b = Submit(Request(6, 3));
  EXPECT_EQ(a->Wait().finish_reason, FinishReason::kError);
  GenerationUpdate g = b->Wait();
  EXPECT_EQ(g.finish_reason, FinishReason::kLength);
  EXPECT_EQ(b->tokens(), Expected(6, 3));
  EXPECT_EQ(engine_.sequences(), 0);
}

}  // namespace
}  // namespace expertd::server
