// The daemon over gRPC against the reference: for every case of the
// deepseek_v3 fixture (multi-head latent attention over the compressed KV
// cache, sigmoid grouped routing), GenerateUnary with the prompt's token ids
// and greedy sampling returns the reference's 16 greedy tokens.
#include <signal.h>

#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "tests/golden/golden_data.h"
#include "tests/testing/expertd_process.h"

namespace expertd::golden {
namespace {

std::vector<int32_t> GenerateGreedy(const std::shared_ptr<grpc::Channel>& channel,
                                    const std::vector<int32_t>& prompt, int n) {
  auto stub = v1::InferenceService::NewStub(channel);
  v1::GenerateRequest req;
  for (int32_t t : prompt) req.mutable_token_ids()->add_ids(static_cast<uint32_t>(t));
  req.mutable_stopping()->set_max_new_tokens(n);
  req.mutable_stopping()->set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GenerateUnaryResponse resp;
  grpc::Status s = stub->GenerateUnary(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return {resp.token_ids().begin(), resp.token_ids().end()};
}

TEST(DaemonGoldenTest, DeepseekV3GreedyTokensMatchTheReference) {
  auto golden = LoadGolden("deepseek_v3");
  ASSERT_TRUE(golden.ok()) << golden.status();
  testing::ExpertdProcess daemon;
  absl::Status s =
      daemon.Start(FixtureDir("deepseek_v3"), {"--threads=2", "--shutdown_grace_seconds=1"},
                   ::testing::TempDir());
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(daemon.WaitUntilServing(absl::Seconds(60))) << daemon.Output();
  for (const GoldenCase& c : golden->cases) {
    EXPECT_EQ(GenerateGreedy(daemon.channel(), c.input_ids, 16), c.greedy) << c.name;
  }
  daemon.process().Signal(SIGTERM);
  EXPECT_EQ(daemon.process().Wait(absl::Seconds(30)), 0) << daemon.Output();
}

}  // namespace
}  // namespace expertd::golden
