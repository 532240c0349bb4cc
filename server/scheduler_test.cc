// Scheduler tests on a real engine (the qwen3_moe fixture, CPU backend).
// Time comes from a FakeClock: deadlines and timings are exact, and no test
// depends on how fast the machine is.
#include "server/scheduler.h"

#include <atomic>
#include <functional>
#include <memory>
#include <random>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace expertd::server {
namespace {

// Collects one request's updates. Optional behaviour runs on the scheduler
// thread inside each update (the scheduler waits for it): a hook (e.g. moving
// the fake clock), a gate that holds the scheduler at the first update until
// the test opens it, or a cancel at the Nth update.
class Collector : public GenerationObserver {
 public:
  // `hook(n)` runs at the n-th update (1-based).
  void SetHook(std::function<void(int)> hook) { hook_ = std::move(hook); }
  // The first update blocks until Open() (at most 60 s, then the test fails).
  void CloseGate() { gated_ = true; }
  void Open() { gate_.Notify(); }
  // Cancels at the n-th update, through the handle given to SetHandle (which
  // may come later: the update waits for it).
  void CancelAt(int n) { cancel_at_ = n; }
  void SetHandle(std::shared_ptr<RequestHandle> handle) {
    absl::MutexLock lock(&mu_);
    handle_ = std::move(handle);
  }

  void OnUpdate(GenerationUpdate u) override {
    const int n = ++seen_;
    if (n == 1) first_update_.Notify();
    if (hook_) hook_(n);
    if (gated_ && n == 1) EXPECT_TRUE(gate_.WaitForNotificationWithTimeout(absl::Seconds(60)));
    absl::MutexLock lock(&mu_);
    if (n == cancel_at_) {
      auto has_handle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return handle_ != nullptr; };
      EXPECT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&has_handle), absl::Seconds(60)));
      if (handle_ != nullptr) handle_->Cancel();
    }
    tokens_.insert(tokens_.end(), u.token_ids.begin(), u.token_ids.end());
    if (u.finished) {
      final_ = u;
      done_.Notify();
    }
  }
  const GenerationUpdate& Wait() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(60)));
    return final_;
  }
  bool WaitForFirstUpdate() {
    return first_update_.WaitForNotificationWithTimeout(absl::Seconds(60));
  }
  std::vector<int32_t> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  bool done() { return done_.HasBeenNotified(); }

 private:
  // Set before Submit, read on the scheduler thread.
  std::function<void(int)> hook_;
  bool gated_ = false;
  int cancel_at_ = 0;
  std::atomic<int> seen_{0};
  absl::Notification gate_;
  absl::Notification first_update_;

  absl::Mutex mu_;
  std::shared_ptr<RequestHandle> handle_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  GenerationUpdate final_;
  absl::Notification done_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ckpt = models::Checkpoint::Open("tests/data/fixtures/qwen3_moe");
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::shared_ptr<const models::Checkpoint>(std::move(*ckpt));
  }

  void MakeScheduler(SchedulerOptions so, uint64_t kv_bytes = 8 << 20) {
    engine::EngineOptions eo;
    eo.backend.threads = 2;
    eo.kv_cache_bytes = kv_bytes;
    eo.kv_block_size = 16;
    auto e = engine::Engine::Create(checkpoint_, eo);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
    so.eos_token_ids = checkpoint_->config().eos_token_ids;
    so.max_context = checkpoint_->config().max_position_embeddings;
    so.clock = &clock_;
    scheduler_ = std::make_unique<Scheduler>(engine_.get(), nullptr, so, nullptr);
    scheduler_->Start();
  }

  GenerationRequest Request(std::vector<int32_t> prompt, int max_new, float temperature,
                            uint64_t seed) {
    GenerationRequest r;
    r.request_id = "r";
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    r.ignore_eos = true;
    r.arrival = clock_.Now();
    return r;
  }

  std::vector<int32_t> RunAlone(GenerationRequest r) {
    auto c = std::make_shared<Collector>();
    auto h = scheduler_->Submit(std::move(r), c);
    EXPECT_TRUE(h.ok()) << h.status();
    const GenerationUpdate& f = c->Wait();
    EXPECT_TRUE(f.status.ok()) << f.status;
    return c->tokens();
  }

  std::vector<int32_t> Prompt(int n, int salt) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 37 + salt * 11 + 3) % 500);
    return p;
  }

  FakeClock clock_{1'700'000'000'000'000'000};  // some day in 2023
  std::shared_ptr<const models::Checkpoint> checkpoint_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, GreedyLengthFinishAndUsage) {
  MakeScheduler({});
  auto c = std::make_shared<Collector>();
  ASSERT_TRUE(scheduler_->Submit(Request(Prompt(7, 0), 5, 0, 1), c).ok());
  const GenerationUpdate& f = c->Wait();
  EXPECT_TRUE(f.status.ok());
  EXPECT_EQ(f.finish_reason, FinishReason::kLength);
  EXPECT_EQ(f.prompt_tokens, 7);
  EXPECT_EQ(f.completion_tokens, 5);
  EXPECT_EQ(c->tokens().size(), 5u);
  EXPECT_LE(f.timing.time_to_first_token, f.timing.total_time);
  EXPECT_EQ(engine_->kv_cache_stats().blocks_free, engine_->kv_cache_stats().blocks_total);
}

// Batching must not change results: 12 concurrent sampled requests give the
// same tokens as each run alone (same seeds), with a small step budget so
// prefills are chunked and interleaved with decodes.
TEST_F(SchedulerTest, ConcurrentResultsEqualSoloResults) {
  SchedulerOptions so;
  so.max_batch_tokens = 9;
  MakeScheduler(so);
  const int n = 12;
  std::vector<std::vector<int32_t>> solo(n);
  for (int i = 0; i < n; ++i)
    solo[i] = RunAlone(Request(Prompt(5 + 3 * i, i), 6, i % 3 == 0 ? 0.0f : 0.9f, 100 + i));
  std::vector<std::shared_ptr<Collector>> cs;
  for (int i = 0; i < n; ++i) {
    cs.push_back(std::make_shared<Collector>());
    ASSERT_TRUE(
        scheduler_
            ->Submit(Request(Prompt(5 + 3 * i, i), 6, i % 3 == 0 ? 0.0f : 0.9f, 100 + i), cs[i])
            .ok());
  }
  for (int i = 0; i < n; ++i) {
    cs[i]->Wait();
    EXPECT_EQ(cs[i]->tokens(), solo[i]) << "request " << i;
  }
}

TEST_F(SchedulerTest, StopTokenAndMinNewTokens) {
  MakeScheduler({});
  std::vector<int32_t> free_run = RunAlone(Request(Prompt(6, 1), 8, 0, 1));
  ASSERT_EQ(free_run.size(), 8u);
  // Stop on the third generated token.
  GenerationRequest r = Request(Prompt(6, 1), 8, 0, 1);
  r.stop_token_ids = {free_run[2]};
  auto c = std::make_shared<Collector>();
  ASSERT_TRUE(scheduler_->Submit(r, c).ok());
  const GenerationUpdate& f = c->Wait();
  EXPECT_EQ(f.finish_reason, FinishReason::kStop);
  EXPECT_EQ(f.matched_stop_token_id, free_run[2]);
  const std::vector<int32_t> got = c->tokens();
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), free_run[2]);
  EXPECT_LE(got.size(), 3u);
}

TEST_F(SchedulerTest, EosEndsUnlessIgnored) {
  MakeScheduler({});
  std::vector<int32_t> free_run = RunAlone(Request(Prompt(6, 2), 6, 0, 1));
  SchedulerOptions so;
  so.eos_token_ids = {free_run[1]};
  // A second scheduler whose EOS is the second greedy token.
  engine::EngineOptions eo;
  eo.kv_cache_bytes = 4 << 20;
  auto e = engine::Engine::Create(checkpoint_, eo);
  ASSERT_TRUE(e.ok());
  so.max_context = 256;
  so.clock = &clock_;
  Scheduler s(e->get(), nullptr, so, nullptr);
  s.Start();
  GenerationRequest r = Request(Prompt(6, 2), 6, 0, 1);
  r.ignore_eos = false;
  auto c = std::make_shared<Collector>();
  ASSERT_TRUE(s.Submit(r, c).ok());
  EXPECT_EQ(c->Wait().finish_reason, FinishReason::kEos);
  EXPECT_LE(c->tokens().size(), 2u);
  r.ignore_eos = true;
  auto d = std::make_shared<Collector>();
  ASSERT_TRUE(s.Submit(r, d).ok());
  EXPECT_EQ(d->Wait().finish_reason, FinishReason::kLength);
  EXPECT_EQ(d->tokens(), free_run);
  s.Drain(absl::Seconds(5));
}

TEST_F(SchedulerTest, CancelFreesKvWithinAStep) {
  MakeScheduler({});
  auto c = std::make_shared<Collector>();
  c->CancelAt(3);
  auto h = scheduler_->Submit(Request(Prompt(20, 3), 200, 0.8f, 5), c);
  ASSERT_TRUE(h.ok());
  c->SetHandle(*h);
  const GenerationUpdate& f = c->Wait();
  EXPECT_EQ(f.status.code(), absl::StatusCode::kCancelled);
  // Cancelled during the third token's update: reaped before the next step.
  EXPECT_EQ(c->tokens().size(), 3u);
  // After the final update the sequence is gone and its blocks are free.
  EXPECT_EQ(engine_->kv_cache_stats().blocks_free, engine_->kv_cache_stats().blocks_total);
  EXPECT_EQ(scheduler_->stats().running, 0);
}

// Every token moves the clock 10 ms; a 50 ms deadline ends the request before
// its sixth step, and the timings are exact.
TEST_F(SchedulerTest, DeadlineExpiresWhileRunning) {
  MakeScheduler({});
  GenerationRequest r = Request(Prompt(10, 4), 200, 0.8f, 5);
  r.deadline = clock_.Now() + absl::Milliseconds(50);
  auto c = std::make_shared<Collector>();
  c->SetHook([this](int) { clock_.Advance(absl::Milliseconds(10)); });
  ASSERT_TRUE(scheduler_->Submit(r, c).ok());
  const GenerationUpdate& f = c->Wait();
  EXPECT_EQ(f.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(c->tokens().size(), 5u);
  EXPECT_EQ(f.completion_tokens, 5);
  EXPECT_EQ(f.timing.queue_time, absl::ZeroDuration());
  EXPECT_EQ(f.timing.time_to_first_token, absl::ZeroDuration());
  EXPECT_EQ(f.timing.decode_time, absl::Milliseconds(40));
  EXPECT_EQ(f.timing.total_time, absl::Milliseconds(50));
  EXPECT_EQ(engine_->kv_cache_stats().blocks_free, engine_->kv_cache_stats().blocks_total);
}

// The RPC layer may see the deadline pass before the scheduler does: the
// request must still end as DEADLINE_EXCEEDED, not as a client cancel.
TEST_F(SchedulerTest, HandleCancelledForDeadlineEndsWithDeadlineExceeded) {
  MakeScheduler({});
  auto c = std::make_shared<Collector>();
  c->CloseGate();  // holds the scheduler at the first token until the cancel is in
  auto h = scheduler_->Submit(Request(Prompt(10, 4), 200, 0.8f, 5), c);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(c->WaitForFirstUpdate());
  (*h)->Cancel(absl::StatusCode::kDeadlineExceeded);
  (*h)->Cancel();  // a later reason does not replace the first
  c->Open();
  scheduler_->Notify();
  EXPECT_EQ(c->Wait().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(engine_->kv_cache_stats().blocks_free, engine_->kv_cache_stats().blocks_total);
}

TEST_F(SchedulerTest, DeadlinePassedWhileQueued) {
  MakeScheduler({});
  GenerationRequest r = Request(Prompt(10, 4), 20, 0.8f, 5);
  r.deadline = clock_.Now() - absl::Milliseconds(1);
  auto c = std::make_shared<Collector>();
  ASSERT_TRUE(scheduler_->Submit(r, c).ok());
  EXPECT_EQ(c->Wait().status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(c->tokens().empty());
}

// A request that waited in the queue reports that wait in its timings.
TEST_F(SchedulerTest, QueueTimeIsArrivalToFirstStep) {
  MakeScheduler({});
  GenerationRequest r = Request(Prompt(6, 7), 2, 0, 1);
  clock_.Advance(absl::Milliseconds(30));  // arrival was 30 ms ago
  auto c = std::make_shared<Collector>();
  c->SetHook([this](int) { clock_.Advance(absl::Milliseconds(4)); });
  ASSERT_TRUE(scheduler_->Submit(r, c).ok());
  const GenerationUpdate& f = c->Wait();
  EXPECT_TRUE(f.status.ok()) << f.status;
  EXPECT_EQ(f.timing.queue_time, absl::Milliseconds(30));
  EXPECT_EQ(f.timing.time_to_first_token, absl::Milliseconds(30));
  EXPECT_EQ(f.timing.decode_time, absl::Milliseconds(4));
  EXPECT_EQ(f.timing.total_time, absl::Milliseconds(34));
}

TEST_F(SchedulerTest, OverloadIsRefusedNotQueuedForever) {
  SchedulerOptions so;
  so.max_running = 1;
  so.max_queue = 2;
  MakeScheduler(so, 128 << 10);
  // The first request holds the scheduler at its first token until every
  // submission is done, so nothing finishes meanwhile: at most 1 runs and 2
  // wait, so at least 3 are refused whatever the machine's speed (4 when the
  // first was still queued as the third arrived).
  const engine::KvCacheStats kv = engine_->kv_cache_stats();
  ASSERT_LT(kv.blocks_total * kv.block_size, 256)
      << "the test needs a KV cache smaller than one full context";
  ASSERT_GE(kv.blocks_total * kv.block_size, 48);
  // Larger than the whole KV cache: refused at once.
  GenerationRequest huge = Request(Prompt(10, 0), 246, 0, 1);
  auto refused = scheduler_->Submit(huge, std::make_shared<Collector>());
  ASSERT_FALSE(refused.ok());
  // Not RESOURCE_EXHAUSTED: clients retry that, and this can never fit.
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--kv_cache_bytes"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find(std::to_string(scheduler_->kv_capacity_tokens())),
            std::string::npos)
      << refused.status();
  // Fill running + queue, then one more is refused.
  std::vector<std::shared_ptr<Collector>> cs;
  std::vector<std::shared_ptr<RequestHandle>> hs;
  int refused_count = 0;
  for (int i = 0; i < 6; ++i) {
    cs.push_back(std::make_shared<Collector>());
    if (i == 0) cs[0]->CloseGate();
    auto h = scheduler_->Submit(Request(Prompt(8, i), 40, 0.5f, i), cs.back());
    if (h.ok()) {
      hs.push_back(*h);
    } else {
      EXPECT_EQ(h.status().code(), absl::StatusCode::kResourceExhausted);
      ++refused_count;
      cs.pop_back();
    }
  }
  EXPECT_GE(refused_count, 3);
  EXPECT_LE(refused_count, 4);
  cs[0]->Open();
  for (auto& c : cs) EXPECT_TRUE(c->Wait().status.ok());
  // Healthy afterwards.
  EXPECT_EQ(RunAlone(Request(Prompt(4, 9), 3, 0, 1)).size(), 3u);
}

TEST_F(SchedulerTest, DrainEndsRunningWithCancelledReason) {
  MakeScheduler({});
  auto c = std::make_shared<Collector>();
  // A slow client: 220 tokens take at least 11 s, far longer than the grace.
  c->SetHook([](int) { absl::SleepFor(absl::Milliseconds(50)); });
  ASSERT_TRUE(scheduler_->Submit(Request(Prompt(10, 5), 220, 0.8f, 5), c).ok());
  ASSERT_TRUE(c->WaitForFirstUpdate());
  scheduler_->Drain(absl::Milliseconds(20));
  ASSERT_TRUE(c->done());
  EXPECT_TRUE(c->Wait().status.ok());
  EXPECT_EQ(c->Wait().finish_reason, FinishReason::kCancelled);
  EXPECT_LT(c->tokens().size(), 220u);
  auto after = scheduler_->Submit(Request(Prompt(3, 1), 2, 0, 1), std::make_shared<Collector>());
  EXPECT_EQ(after.status().code(), absl::StatusCode::kUnavailable);
}

// Counts final updates; checks nothing arrives after the final one.
class FinalCounter : public GenerationObserver {
 public:
  void OnUpdate(GenerationUpdate u) override {
    absl::MutexLock lock(&mu_);
    if (finals_ > 0) ++after_final_;
    if (u.finished) ++finals_;
  }
  bool WaitFinished(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return finals_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  int finals() {
    absl::MutexLock lock(&mu_);
    return finals_;
  }
  int after_final() {
    absl::MutexLock lock(&mu_);
    return after_final_;
  }

 private:
  absl::Mutex mu_;
  int finals_ = 0;
  int after_final_ = 0;
};

// Checks the slots after every engine step (scheduler thread).
class SlotAuditor : public SchedulerListener {
 public:
  explicit SlotAuditor(int64_t max_running) : max_running_(max_running) {}
  void OnStep(const SchedulerStats& s, int64_t, int64_t) override {
    if (s.running > max_running_ || s.running < 0 || s.waiting < 0 || s.kv_blocks_free < 0 ||
        s.kv_blocks_free > s.kv_blocks_total || s.admission_violations != 0) {
      violations_.fetch_add(1);
    }
    steps_.fetch_add(1);
  }
  void OnFirstToken(absl::Duration) override {}
  void OnInterTokenLatency(absl::Duration) override {}
  void OnRequestFinished(const FinishedRequestInfo&) override { finished_.fetch_add(1); }

  const int64_t max_running_;
  std::atomic<int> violations_{0};
  std::atomic<int> steps_{0};
  std::atomic<int> finished_{0};
};

// Property: whatever the order of arrivals, cancels, deadlines and finishes,
// the admission bookkeeping matches the slots at every step, every accepted
// request ends exactly once, and the KV cache is whole again at the end.
TEST_F(SchedulerTest, AdmissionMatchesSlotsUnderRandomArrivalCancelFinish) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    SchedulerOptions so;
    so.max_running = 3;
    so.max_queue = 4;
    so.max_batch_tokens = 12;
    so.eos_token_ids = checkpoint_->config().eos_token_ids;
    so.max_context = checkpoint_->config().max_position_embeddings;
    so.clock = &clock_;
    engine::EngineOptions eo;
    eo.backend.threads = 1;
    eo.kv_cache_bytes = 256 << 10;  // a few hundred tokens: reservations block admission
    eo.kv_block_size = 16;
    auto e = engine::Engine::Create(checkpoint_, eo);
    ASSERT_TRUE(e.ok()) << e.status();
    SlotAuditor auditor(so.max_running);
    auto sched = std::make_unique<Scheduler>(e->get(), nullptr, so, &auditor);
    sched->Start();
    std::mt19937_64 rng(seed);
    std::vector<std::shared_ptr<FinalCounter>> accepted;
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int op = 0; op < 80; ++op) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 6) {  // arrival, sometimes with a deadline that passes soon
        GenerationRequest r = Request(Prompt(1 + static_cast<int>(rng() % 40), op),
                                      1 + static_cast<int>(rng() % 24), 0.7f, rng());
        if (rng() % 4 == 0)
          r.deadline = clock_.Now() + absl::Milliseconds(static_cast<int64_t>(rng() % 20));
        auto obs = std::make_shared<FinalCounter>();
        auto h = sched->Submit(std::move(r), obs);
        if (h.ok()) {
          accepted.push_back(obs);
          handles.push_back(*h);
        } else {
          EXPECT_TRUE(h.status().code() == absl::StatusCode::kResourceExhausted ||
                      h.status().code() == absl::StatusCode::kInvalidArgument)
              << h.status();
        }
      } else if (what == 6) {  // time passes: some deadlines expire
        clock_.Advance(absl::Milliseconds(static_cast<int64_t>(rng() % 10)));
        sched->Notify();
      } else if (what < 8 && !handles.empty()) {  // cancel a random one (maybe already done)
        handles[rng() % handles.size()]->Cancel(rng() % 2 ? absl::StatusCode::kCancelled
                                                          : absl::StatusCode::kDeadlineExceeded);
        sched->Notify();
      } else if (!accepted.empty()) {  // let a random one finish
        ASSERT_TRUE(accepted[rng() % accepted.size()]->WaitFinished(absl::Seconds(60)));
      }
    }
    for (auto& obs : accepted) ASSERT_TRUE(obs->WaitFinished(absl::Seconds(60)));
    sched->Drain(absl::Seconds(5));
    for (auto& obs : accepted) {
      EXPECT_EQ(obs->finals(), 1);
      EXPECT_EQ(obs->after_final(), 0);
    }
    EXPECT_EQ(auditor.finished_.load(), static_cast<int>(accepted.size()));
    EXPECT_EQ(auditor.violations_.load(), 0);
    EXPECT_GT(auditor.steps_.load(), 0);
    const SchedulerStats st = sched->stats();
    EXPECT_EQ(st.admission_violations, 0);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(st.waiting, 0);
    EXPECT_EQ((*e)->kv_cache_stats().blocks_free, (*e)->kv_cache_stats().blocks_total);
    sched.reset();
  }
}

}  // namespace
}  // namespace expertd::server
