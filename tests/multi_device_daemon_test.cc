// The daemon with --devices=2 (MoEShard, and expert parallelism) serves the
// same greedy tokens over gRPC as with one device, for single and concurrent
// (batched) requests; a bad combination of flags is refused at startup.
#include <signal.h>

#include <fstream>
#include <thread>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/expertd.grpc.pb.h"
#include "tests/testing/expertd_process.h"
#include "tests/testing/metrics_text.h"
#include "tests/testing/subprocess.h"

namespace expertd {
namespace {

constexpr char kModel[] = "tests/data/zoo_default";

std::vector<uint32_t> Prompt(int n, int salt) {
  std::vector<uint32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + salt * 11 + 3) % 500);
  return p;
}

// Greedy tokens for `prompt`, or the RPC's error as a one-element marker.
std::vector<uint32_t> Greedy(v1::InferenceService::Stub* stub, const std::vector<uint32_t>& prompt,
                             std::string* err) {
  v1::GenerateRequest r;
  for (uint32_t id : prompt) r.mutable_token_ids()->add_ids(id);
  r.mutable_stopping()->set_max_new_tokens(8);
  r.mutable_stopping()->set_ignore_eos(true);
  r.mutable_sampling()->set_temperature(0.0f);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  v1::GenerateUnaryResponse u;
  grpc::Status s = stub->GenerateUnary(&ctx, r, &u);
  if (!s.ok()) *err = s.error_message();
  return std::vector<uint32_t>(u.token_ids().begin(), u.token_ids().end());
}

// Runs every prompt concurrently (so they share engine steps) against a
// daemon started with `flags`.
std::vector<std::vector<uint32_t>> Serve(const std::vector<std::string>& flags,
                                         const std::vector<std::vector<uint32_t>>& prompts) {
  testing::ExpertdProcess daemon;
  std::vector<std::string> all = {"--threads=2", "--kv_cache_bytes=16MiB",
                                  "--shutdown_grace_seconds=2"};
  all.insert(all.end(), flags.begin(), flags.end());
  absl::Status st = daemon.Start(kModel, all, ::testing::TempDir());
  EXPECT_TRUE(st.ok()) << st;
  if (!st.ok()) return {};
  EXPECT_TRUE(daemon.WaitUntilServing(absl::Seconds(120))) << daemon.Output();
  auto stub = v1::InferenceService::NewStub(daemon.channel());
  std::vector<std::vector<uint32_t>> out(prompts.size());
  std::vector<std::string> errors(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] { out[i] = Greedy(stub.get(), prompts[i], &errors[i]); });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(errors[i], "") << "prompt " << i;
  daemon.process().Signal(SIGTERM);
  EXPECT_EQ(daemon.process().Wait(absl::Seconds(30)), 0) << daemon.Output();
  return out;
}

TEST(MultiDeviceDaemonTest, TwoDevicesServeTheSameTokensAsOne) {
  const std::vector<std::vector<uint32_t>> prompts = {Prompt(1, 1), Prompt(9, 2), Prompt(40, 3),
                                                      Prompt(17, 4)};
  const auto one = Serve({}, prompts);
  ASSERT_EQ(one.size(), prompts.size());
  for (const auto& tokens : one) ASSERT_EQ(tokens.size(), 8u);
  EXPECT_EQ(Serve({"--devices=2"}, prompts), one);
  EXPECT_EQ(Serve({"--devices=2", "--moe_parallel=expert"}, prompts), one);
  // Each device pages only its shards of every expert.
  EXPECT_EQ(Serve({"--devices=2", "--expert_offload",
                   "--expert_pack_dir=" + ::testing::TempDir() + "/sharded_packs"},
                  prompts),
            one);
}

// With per-device stores GetExpertStats reports each device's: every device
// was asked for the slice of every routed expert, so their requests agree;
// /metrics sums them.
TEST(MultiDeviceDaemonTest, ExpertStatsReportEachDevicesStore) {
  const std::string dir = ::testing::TempDir();
  const std::string token = "multi-device-admin-token-0123";
  const std::string token_file = dir + "/multi_device_admin_token";
  std::ofstream(token_file) << token << "\n";
  testing::ExpertdProcess daemon;
  ASSERT_TRUE(daemon
                  .Start(kModel,
                         {"--threads=2", "--kv_cache_bytes=16MiB", "--devices=2",
                          "--expert_offload", "--expert_pack_dir=" + dir + "/stats_packs",
                          "--admin_token_file=" + token_file, "--metrics_listen=127.0.0.1:0"},
                         dir)
                  .ok());
  ASSERT_TRUE(daemon.WaitUntilServing(absl::Seconds(120))) << daemon.Output();
  std::string err;
  auto inference = v1::InferenceService::NewStub(daemon.channel());
  EXPECT_EQ(Greedy(inference.get(), Prompt(9, 5), &err).size(), 8u) << err;
  auto admin = v1::AdminService::NewStub(daemon.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  ctx.AddMetadata("authorization", "Bearer " + token);
  v1::ExpertStats stats;
  const grpc::Status s = admin->GetExpertStats(&ctx, v1::GetExpertStatsRequest(), &stats);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(stats.devices_size(), 2);
  EXPECT_EQ(stats.policy(), stats.devices(0).policy());
  EXPECT_GT(stats.tokens_processed(), 0u);
  EXPECT_FALSE(stats.has_totals());
  uint64_t hits = 0, misses = 0;
  for (const v1::ExpertStats& device : stats.devices()) {
    EXPECT_GT(device.totals().hits() + device.totals().misses(), 0u);
    EXPECT_EQ(device.totals().hits() + device.totals().misses(),
              stats.devices(0).totals().hits() + stats.devices(0).totals().misses());
    EXPECT_GT(device.device_cache_capacity_bytes(), 0u);
    EXPECT_GT(device.layers_size(), 0);
    hits += device.totals().hits();
    misses += device.totals().misses();
  }
  httplib::Client http("127.0.0.1", daemon.MetricsPort());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res) << "no /metrics response";
  EXPECT_EQ(testing::SumMetric(res->body, "expertd:expert_cache_hits_total", ""),
            static_cast<double>(hits));
  EXPECT_EQ(testing::SumMetric(res->body, "expertd:expert_cache_misses_total", ""),
            static_cast<double>(misses));
  daemon.process().Signal(SIGTERM);
  EXPECT_EQ(daemon.process().Wait(absl::Seconds(30)), 0) << daemon.Output();
}

TEST(MultiDeviceDaemonTest, OffloadWithExpertParallelismIsRefusedNamingTheFlag) {
  testing::Subprocess p;
  ASSERT_TRUE(p.Start({testing::RunfilePath("server/expertd"), std::string("--model_dir=") + kModel,
                       "--listen=127.0.0.1:0", "--devices=2", "--moe_parallel=expert",
                       "--expert_offload"},
                      ::testing::TempDir() + "/refused.log"));
  EXPECT_EQ(p.Wait(absl::Seconds(20)), 2);
  EXPECT_NE(p.Output().find("--moe_parallel"), std::string::npos) << p.Output();
}

}  // namespace
}  // namespace expertd
