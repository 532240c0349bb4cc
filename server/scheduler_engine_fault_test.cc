// End to end below the RPC layer: the scheduler over a real engine whose
// backend faults in one step (InstrumentedBackend). The request in that step
// ends with an error; the next request is served normally.
#include <memory>
#include <vector>

#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "engine/backend/backend_factory.h"
#include "engine/backend/instrumented_backend.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "server/scheduler.h"

namespace expertd::server {
namespace {

class Collector : public GenerationObserver {
 public:
  void OnUpdate(GenerationUpdate u) override {
    if (!u.finished) return;
    final_ = u;
    done_.Notify();
  }
  GenerationUpdate Wait() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(absl::Seconds(60)));
    return final_;
  }

 private:
  GenerationUpdate final_;
  absl::Notification done_;
};

TEST(SchedulerEngineFaultTest, ADeviceFaultFailsItsRequestAndTheNextOneIsServed) {
  auto ckpt = models::Checkpoint::Open("tests/data/fixtures/qwen3_moe");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::shared_ptr<const models::Checkpoint> checkpoint(std::move(*ckpt));
  engine::InstrumentedBackend* backend = nullptr;
  engine::EngineOptions eo;
  eo.backend.threads = 2;
  eo.kv_cache_bytes = 4 << 20;
  eo.backend_factory =
      [&backend](
          const engine::BackendOptions& b) -> absl::StatusOr<std::unique_ptr<engine::Backend>> {
    auto cpu = engine::CreateBackend(b);
    if (!cpu.ok()) return cpu.status();
    auto wrapped = std::make_unique<engine::InstrumentedBackend>(std::move(*cpu));
    backend = wrapped.get();
    return std::unique_ptr<engine::Backend>(std::move(wrapped));
  };
  auto e = engine::Engine::Create(checkpoint, eo);
  ASSERT_TRUE(e.ok()) << e.status();
  FakeClock clock;
  SchedulerOptions so;
  so.clock = &clock;
  so.max_context = checkpoint->config().max_position_embeddings;
  Scheduler scheduler(e->get(), nullptr, so, nullptr);
  scheduler.Start();

  GenerationRequest r;
  r.request_id = "r";
  r.prompt = {5, 6, 7, 8};
  r.max_new_tokens = 4;
  r.ignore_eos = true;
  r.arrival = clock.Now();
  backend->FailNthOp(3, absl::InternalError("injected device fault"));  // inside the first step
  auto a = std::make_shared<Collector>();
  ASSERT_TRUE(scheduler.Submit(r, a).ok());
  GenerationUpdate f = a->Wait();
  EXPECT_EQ(f.finish_reason, FinishReason::kError);
  EXPECT_EQ(f.error_message, "engine step failed: injected device fault");
  EXPECT_EQ(f.completion_tokens, 0);

  auto b = std::make_shared<Collector>();
  ASSERT_TRUE(scheduler.Submit(r, b).ok());
  GenerationUpdate g = b->Wait();
  EXPECT_TRUE(g.status.ok());
  EXPECT_EQ(g.finish_reason, FinishReason::kLength);
  EXPECT_EQ(g.completion_tokens, 4);
  EXPECT_EQ((*e)->kv_cache_stats().blocks_free, (*e)->kv_cache_stats().blocks_total);
  scheduler.Drain(absl::ZeroDuration());
}

}  // namespace
}  // namespace expertd::server
