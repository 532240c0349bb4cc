// The daemon's lifecycle as an operator sees it: signals (SIGHUP drains, a
// second signal ends a drain at once, each logged), the --port_file, the
// separate --admin_listen port, and the start-up warning for a KV cache too
// small for one full-context sequence.
#include <signal.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/expertd_process.h"

namespace expertd {
namespace {

constexpr char kSmallModel[] = "tests/data/fixtures/qwen2_moe_mixed";
constexpr char kSlowModel[] = "tests/data/zoo_default";  // a few ms per token

// Waits until the daemon logged a line with this "msg"; false at the deadline.
bool WaitForLog(const testing::ExpertdProcess& d, const std::string& msg, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (d.LogLines(msg).empty()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

v1::GenerateRequest LongRequest(uint32_t max_new) {
  v1::GenerateRequest r;
  for (uint32_t id : {5u, 9u, 31u, 77u}) r.mutable_token_ids()->add_ids(id);
  r.mutable_stopping()->set_max_new_tokens(max_new);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

TEST(LifecycleTest, SighupDrainsAndExitsZeroWithALogLine) {
  testing::ExpertdProcess d;
  ASSERT_TRUE(d.Start(kSmallModel, {"--shutdown_grace_seconds=5"}, ::testing::TempDir()).ok());
  ASSERT_TRUE(d.WaitUntilServing(absl::Seconds(60))) << d.Output();
  d.process().Signal(SIGHUP);
  EXPECT_EQ(d.process().Wait(absl::Seconds(30)), 0) << d.Output();
  const std::vector<std::string> stop = d.LogLines("stop signal");
  ASSERT_EQ(stop.size(), 1u) << d.Output();
  EXPECT_NE(stop[0].find("SIGHUP"), std::string::npos) << stop[0];
  EXPECT_EQ(d.LogLines("stopped").size(), 1u) << d.Output();
}

TEST(LifecycleTest, SecondSigtermEndsADrainAtOnce) {
  testing::ExpertdProcess d;
  ASSERT_TRUE(
      d.Start(kSlowModel, {"--shutdown_grace_seconds=120", "--threads=1"}, ::testing::TempDir())
          .ok());
  ASSERT_TRUE(d.WaitUntilServing(absl::Seconds(60))) << d.Output();
  auto stub = v1::InferenceService::NewStub(d.channel());
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, LongRequest(3000));  // far longer than this test
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg)) << d.Output();
  d.process().Signal(SIGTERM);
  ASSERT_TRUE(WaitForLog(d, "draining", absl::Seconds(30))) << d.Output();
  d.process().Signal(SIGTERM);
  EXPECT_EQ(d.process().Wait(absl::Seconds(30)), 3) << d.Output();
  const std::vector<std::string> forced =
      d.LogLines("second stop signal: exiting without finishing the drain");
  ASSERT_EQ(forced.size(), 1u) << d.Output();
  EXPECT_NE(forced[0].find("SIGTERM"), std::string::npos) << forced[0];
  ctx.TryCancel();
  reader->Finish();
}

TEST(LifecycleTest, PortFileHasGrpcAndMetricsPortsAsJson) {
  const std::string dir = ::testing::TempDir();
  testing::ExpertdProcess d;
  ASSERT_TRUE(d.Start(kSmallModel, {"--metrics_listen=127.0.0.1:0"}, dir).ok());
  EXPECT_GT(d.port(), 0);
  EXPECT_GT(d.MetricsPort(), 0);
  EXPECT_NE(d.MetricsPort(), d.port());
  ASSERT_TRUE(d.WaitUntilServing(absl::Seconds(60))) << d.Output();
  d.process().Signal(SIGTERM);
  EXPECT_EQ(d.process().Wait(absl::Seconds(30)), 0) << d.Output();
}

// gRPC health of `service` on 127.0.0.1:port: "SERVING", ... or "error: ...".
std::string HealthOn(int port, const std::string& service) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return "error: " + s.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

grpc::StatusCode GetExpertStatsOn(int port, const std::string& token) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto admin = v1::AdminService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.AddMetadata("authorization", "Bearer " + token);
  v1::ExpertStats stats;
  return admin->GetExpertStats(&ctx, v1::GetExpertStatsRequest(), &stats).error_code();
}

TEST(LifecycleTest, AdminListenServesAdminServiceOnlyOnItsOwnPort) {
  const std::string dir = ::testing::TempDir();
  const std::string token = "lifecycle-admin-token-0123";
  const std::string token_file = dir + "/lifecycle_admin_token";
  std::ofstream(token_file) << token << "\n";
  testing::ExpertdProcess d;
  ASSERT_TRUE(d.Start(kSmallModel,
                      {"--admin_listen=127.0.0.1:0", "--admin_token_file=" + token_file,
                       "--http_listen=127.0.0.1:0"},
                      dir)
                  .ok());
  ASSERT_GT(d.AdminPort(), 0) << d.Output();
  EXPECT_NE(d.AdminPort(), d.port());
  EXPECT_GT(d.HttpPort(), 0);
  ASSERT_TRUE(d.WaitUntilServing(absl::Seconds(60))) << d.Output();
  EXPECT_EQ(HealthOn(d.AdminPort(), ""), "SERVING");
  EXPECT_EQ(HealthOn(d.AdminPort(), "expertd.v1.AdminService"), "SERVING");
  EXPECT_EQ(HealthOn(d.port(), "expertd.v1.InferenceService"), "SERVING");
  // Each port serves only its own service.
  // Past authentication into the RPC (no --expert_offload: no cache to report).
  EXPECT_EQ(GetExpertStatsOn(d.AdminPort(), token), grpc::StatusCode::FAILED_PRECONDITION)
      << d.Output();
  EXPECT_EQ(GetExpertStatsOn(d.AdminPort(), "wrong-token-wrong-token"),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(GetExpertStatsOn(d.port(), token), grpc::StatusCode::UNIMPLEMENTED);
  auto inference = v1::InferenceService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", d.AdminPort()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  EXPECT_EQ(inference->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  d.process().Signal(SIGTERM);
  EXPECT_EQ(d.process().Wait(absl::Seconds(30)), 0) << d.Output();
}

TEST(LifecycleTest, WithoutAdminListenAdminServiceSharesTheGrpcPort) {
  const std::string dir = ::testing::TempDir();
  const std::string token = "lifecycle-admin-token-4567";
  const std::string token_file = dir + "/lifecycle_admin_token_shared";
  std::ofstream(token_file) << token << "\n";
  testing::ExpertdProcess d;
  ASSERT_TRUE(d.Start(kSmallModel, {"--admin_token_file=" + token_file}, dir).ok());
  EXPECT_EQ(d.AdminPort(), d.port());
  EXPECT_EQ(d.HttpPort(), 0);
  ASSERT_TRUE(d.WaitUntilServing(absl::Seconds(60))) << d.Output();
  EXPECT_EQ(HealthOn(d.port(), "expertd.v1.AdminService"), "SERVING");
  EXPECT_EQ(GetExpertStatsOn(d.port(), token), grpc::StatusCode::FAILED_PRECONDITION)
      << d.Output();
  d.process().Signal(SIGTERM);
  EXPECT_EQ(d.process().Wait(absl::Seconds(30)), 0) << d.Output();
}

TEST(LifecycleTest, KvCacheSmallerThanOneContextWarnsAndRefusesWithoutRetry) {
  testing::ExpertdProcess d;
  ASSERT_TRUE(d.Start(kSlowModel, {"--kv_cache_bytes=1MiB"}, ::testing::TempDir()).ok());
  ASSERT_TRUE(d.WaitUntilServing(absl::Seconds(60))) << d.Output();
  EXPECT_EQ(d.LogLines("KV cache cannot hold one full-context sequence").size(), 1u) << d.Output();
  auto stub = v1::InferenceService::NewStub(d.channel());
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info).ok());
    ASSERT_EQ(info.warnings_size(), 1) << info.DebugString();
    EXPECT_TRUE(absl::StrContains(info.warnings(0), "--kv_cache_bytes")) << info.warnings(0);
  }
  // Fits the context (4096) but never the cache: not retryable, names the limit.
  grpc::ClientContext ctx;
  v1::GenerateUnaryResponse out;
  grpc::Status s = stub->GenerateUnary(&ctx, LongRequest(3000), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "--kv_cache_bytes")) << s.error_message();
  d.process().Signal(SIGTERM);
  EXPECT_EQ(d.process().Wait(absl::Seconds(30)), 0) << d.Output();
}

}  // namespace
}  // namespace expertd
