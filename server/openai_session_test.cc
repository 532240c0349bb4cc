// openai::Session::Start with the zoo model: chat templates render on the tokenize
// pool, never on the calling (HTTP worker) thread. The pool's only thread is
// held by the test, so every step waits on a condition, not on time.
#include "server/openai/session.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/model_runtime.h"
#include "server/openai/api_request.h"
#include "server/options.h"
#include "server/tokenize_pool.h"

namespace expertd::server::openai {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);  // a deadline that fails the test

template <typename Pred>
bool WaitFor(Pred done) {
  const absl::Time deadline = absl::Now() + kWait;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(SessionTest, ChatTemplatesRenderOnTheTokenizePool) {
  ServerOptions o;
  o.model_dir = "tests/data/zoo_default";
  o.model_name = "zoo";
  o.backend = "cpu";
  o.threads = 1;
  o.kv_cache_bytes = 64 << 20;
  auto runtime = ModelRuntime::Load(o, nullptr, RealClock::Get());
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  ASSERT_TRUE((*runtime)->chat_formatter().has_template());
  auto request = ParseApiRequest(
      Endpoint::kChatCompletions,
      nlohmann::ordered_json::parse(
          R"({"model": "zoo", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})"));
  ASSERT_TRUE(request.ok()) << request.status();

  absl::Notification release;  // before the pool: outlives its held job
  TokenizePool pool({1, 1});
  absl::Notification started;
  ASSERT_TRUE(pool.Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));

  // A short chat still renders on the pool: with its thread busy, the
  // render waits in the queue (an inline render would not touch it).
  absl::StatusOr<std::shared_ptr<Session>> session = absl::UnknownError("not started");
  ApiError error;
  std::thread http_worker([&] {
    session = Session::Start(*request, runtime->get(), o.kv_block_size, "chatcmpl-1", &pool,
                             &error);
  });
  const bool queued = WaitFor([&] { return pool.stats().queued == 1; });
  EXPECT_TRUE(queued) << "the chat template was not rendered on the pool";
  // With the queue full too, another chat is refused (429), not rendered inline.
  ApiError refused_error;
  auto refused = Session::Start(*request, runtime->get(), o.kv_block_size, "chatcmpl-2", &pool,
                                &refused_error);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(refused_error.http_status, 429);
  EXPECT_EQ(refused_error.code, "rate_limit_exceeded");

  release.Notify();
  http_worker.join();
  ASSERT_TRUE(session.ok()) << session.status() << " " << error.message;
  EXPECT_EQ((*session)->choices(), 1);
  EXPECT_GT((*session)->prompt_tokens(0), 0);
  // The held job and the render. A job is counted after it returns, so the
  // render's caller can be back before the count moves: wait for it.
  EXPECT_TRUE(WaitFor([&] { return pool.stats().completed >= 2; }))
      << "completed " << pool.stats().completed;
  (*session)->Cancel();
}

}  // namespace
}  // namespace expertd::server::openai
