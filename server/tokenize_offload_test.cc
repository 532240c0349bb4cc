// The inference service over real gRPC with the zoo model: long text prompts
// wait for the tokenize pool, never on gRPC's threads, so a short request is
// served while every tokenize thread is busy; a full pool answers
// RESOURCE_EXHAUSTED. The pool is held busy by the test (a job that waits on a
// notification), so every step waits on a condition, not on time.
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "server/inference_service.h"
#include "server/model_runtime.h"
#include "server/serving_state.h"
#include "server/tokenize_pool.h"

namespace expertd::server {
namespace {

constexpr absl::Duration kWait = absl::Seconds(60);  // a deadline that fails the test

// Waits for `done` with a deadline (true when it held in time).
template <typename Pred>
bool WaitFor(Pred done) {
  const absl::Time deadline = absl::Now() + kWait;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

class TokenizeOffloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.model_dir = "tests/data/zoo_default";
    o.model_name = "zoo";
    o.backend = "cpu";
    o.threads = 1;
    o.kv_cache_bytes = 64 << 20;
    state_ = std::make_unique<ServingState>(o);
    auto runtime = ModelRuntime::Load(o, nullptr, RealClock::Get());
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    auto model = std::make_shared<LoadedModel>();
    model->name = o.model_name;
    model->config = (*runtime)->config();
    model->runtime = *std::move(runtime);
    max_prompt_bytes_ = model->runtime->limits().max_prompt_bytes;
    state_->SetModel(model);
    service_ = std::make_unique<InferenceServiceImpl>(state_.get(), nullptr, &pool_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::InferenceService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + kWait));
  }

  // Occupies the pool's only thread until release_.
  void HoldThePool() {
    absl::Notification started;
    ASSERT_TRUE(pool_
                    .Submit([&started, this] {
                      started.Notify();
                      release_.WaitForNotification();
                    })
                    .ok());
    ASSERT_TRUE(started.WaitForNotificationWithTimeout(kWait));
  }

  grpc::Status Generate(const std::string& text, v1::GenerateUnaryResponse* out) {
    v1::GenerateRequest req;
    req.set_text(text);
    req.mutable_stopping()->set_max_new_tokens(2);
    req.mutable_sampling()->set_temperature(0);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    return stub_->GenerateUnary(&ctx, req, out);
  }

  std::string LongPrompt() const {
    std::string text;
    // Words that are one token each in the zoo's vocabulary: ~12 bytes per
    // token, so the prompt is long in bytes yet fits the 4096-token context.
    while (text.size() < kInlineTokenizeBytes + 1000) {
      text += " electricity instruments temperature information parameters";
    }
    return text;
  }

  absl::Notification release_;  // before pool_: outlives its held job
  TokenizePool pool_{{1, 1}};
  size_t max_prompt_bytes_ = 0;
  std::unique_ptr<ServingState> state_;
  std::unique_ptr<InferenceServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::InferenceService::Stub> stub_;
};

TEST_F(TokenizeOffloadTest, ShortRequestsAreServedWhileThePoolIsBusy) {
  ASSERT_GT(max_prompt_bytes_, kInlineTokenizeBytes + 1000) << "the long prompt must be allowed";
  HoldThePool();
  // A long prompt queues behind the held thread (its call is parked, no gRPC
  // thread waits for it).
  grpc::Status queued_status;
  v1::GenerateUnaryResponse queued_response;
  std::thread queued([&] { queued_status = Generate(LongPrompt(), &queued_response); });
  ASSERT_TRUE(WaitFor([&] { return pool_.stats().queued == 1; }));

  // The queue is full: the next long prompt is refused at once, retryable.
  v1::GenerateUnaryResponse refused_response;
  grpc::Status refused = Generate(LongPrompt(), &refused_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("--tokenize_queue_length"), std::string::npos)
      << refused.error_message();
  // So is a long Tokenize call.
  {
    v1::TokenizeRequest req;
    req.set_text(LongPrompt());
    v1::TokenizeResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    EXPECT_EQ(stub_->Tokenize(&ctx, req, &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  // A short prompt is tokenized inline and generated while the pool is held.
  v1::GenerateUnaryResponse short_response;
  grpc::Status short_status = Generate("the cat sat.", &short_response);
  EXPECT_TRUE(short_status.ok()) << short_status.error_message();
  EXPECT_EQ(short_response.usage().completion_tokens(), 2);
  EXPECT_EQ(pool_.stats().running, 1);  // still held: the short one did not need it
  EXPECT_EQ(pool_.stats().queued, 1);

  // Released, the queued prompt is tokenized and generated.
  release_.Notify();
  queued.join();
  EXPECT_TRUE(queued_status.ok()) << queued_status.error_message();
  EXPECT_GT(queued_response.usage().prompt_tokens(), 0);
  EXPECT_EQ(queued_response.usage().completion_tokens(), 2);
}

TEST_F(TokenizeOffloadTest, PromptOverTheBytesBoundIsRefusedWithoutThePool) {
  HoldThePool();
  // Over the bound: refused by size at once, even though the pool is busy.
  v1::GenerateUnaryResponse response;
  grpc::Status s = Generate(std::string(max_prompt_bytes_ + 1, 'a'), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("bytes"), std::string::npos) << s.error_message();
  EXPECT_EQ(pool_.stats().queued, 0);
}

TEST_F(TokenizeOffloadTest, TokenizeOverTheBytesBoundIsRefusedBeforeTokenizing) {
  HoldThePool();
  // Refused by size at once (the pool is busy, so a call that went on to
  // tokenize would wait for it), naming the bound.
  v1::TokenizeRequest req;
  req.set_text(std::string(max_prompt_bytes_ + 1, 'a'));
  v1::TokenizeResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  grpc::Status s = stub_->Tokenize(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find(absl::StrCat("at most ", max_prompt_bytes_, " bytes")),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(s.error_message().rfind("text:", 0), 0u) << s.error_message();
  EXPECT_EQ(pool_.stats().queued, 0);
  EXPECT_EQ(resp.token_ids_size(), 0);
}

}  // namespace
}  // namespace expertd::server
