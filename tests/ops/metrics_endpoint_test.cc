// Integration test: the real expertd binary with --metrics_listen, scraped
// over HTTP with cpp-httplib's client: /metrics has every metric family,
// /health follows gRPC health (200 serving, 503 draining), the port lives
// until the drain ends, and ports already in use stop the daemon with exit 1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/expertd_process.h"

namespace expertd {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using testing::ExpertdProcess;
using testing::Subprocess;

constexpr char kModel[] = "tests/data/fixtures/qwen2_moe_mixed";

// Every family the daemon exports (server/metrics/serving_metrics.cc), as
// "# TYPE" lines: a dashboard built on these names must find them all.
constexpr const char* kFamilies[] = {
    "expertd:build_info gauge",
    "expertd:cache_config_info gauge",
    "expertd:num_requests_running gauge",
    "expertd:num_requests_waiting gauge",
    "expertd:kv_cache_usage_perc gauge",
    "expertd:prompt_tokens_total counter",
    "expertd:generation_tokens_total counter",
    "expertd:iteration_tokens_total histogram",
    "expertd:num_preemptions_total counter",
    "expertd:request_success_total counter",
    "expertd:requests_total counter",
    "expertd:time_to_first_token_seconds histogram",
    "expertd:inter_token_latency_seconds histogram",
    "expertd:request_time_per_output_token_seconds histogram",
    "expertd:e2e_request_latency_seconds histogram",
    "expertd:request_queue_time_seconds histogram",
    "expertd:request_prefill_time_seconds histogram",
    "expertd:request_decode_time_seconds histogram",
    "expertd:request_inference_time_seconds histogram",
    "expertd:request_prompt_tokens histogram",
    "expertd:request_generation_tokens histogram",
    "expertd:request_params_max_tokens histogram",
    "expertd:expert_cache_hits_total counter",
    "expertd:expert_cache_misses_total counter",
    "expertd:expert_prefetch_issued_total counter",
    "expertd:expert_prefetch_used_total counter",
    "expertd:expert_prefetch_wasted_total counter",
    "expertd:expert_stall_seconds_total counter",
    "expertd:expert_bytes_moved_total counter",
    "expertd:experts_on_device gauge",
    "expertd:expert_cache_used_bytes gauge",
    "expertd:expert_cache_capacity_bytes gauge",
};

HealthCheckResponse::ServingStatus GrpcHealth(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, HealthCheckRequest(), &resp);
  return s.ok() ? resp.status() : HealthCheckResponse::UNKNOWN;
}

// A TCP socket listening on 127.0.0.1:<free port>, without SO_REUSEPORT.
class TakenPort {
 public:
  TakenPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 && listen(fd_, 1) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~TakenPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(MetricsEndpointTest, ScrapesMetricsAndHealthThenDrains) {
  ExpertdProcess daemon;
  ASSERT_TRUE(daemon
                  .Start(kModel, {"--metrics_listen=127.0.0.1:0", "--shutdown_grace_seconds=2"},
                         ::testing::TempDir())
                  .ok());
  const int metrics_port = daemon.MetricsPort();
  ASSERT_GT(metrics_port, 0) << daemon.Output();
  auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (GrpcHealth(channel) != HealthCheckResponse::SERVING) {
    ASSERT_LT(absl::Now(), deadline) << daemon.Output();
    absl::SleepFor(absl::Milliseconds(20));
  }

  httplib::Client http("127.0.0.1", metrics_port);
  http.set_read_timeout(5);
  auto health = http.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "SERVING\n");

  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = metrics->body;
  for (const char* family : kFamilies) {
    EXPECT_NE(text.find(absl::StrCat("\n# TYPE ", family, "\n")), std::string::npos) << family;
  }
  EXPECT_NE(text.find("\nexpertd:num_requests_waiting{model_name=\"qwen2_moe_mixed\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nexpertd:request_success_total{model_name=\"qwen2_moe_mixed\",finished_"
                      "reason=\"stop\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("expertd:cache_config_info{model_name=\"qwen2_moe_mixed\","),
            std::string::npos);

  // Keep one call in flight (a health Watch stream) so the drain lasts the
  // whole grace period: meanwhile /health says 503 and /metrics still answers.
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext watch_ctx;
  auto watch = stub->Watch(&watch_ctx, HealthCheckRequest());
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  daemon.process().Signal(SIGTERM);
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  health = http.Get("/health");
  ASSERT_TRUE(health) << "metrics port closed before the drain ended: "
                      << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(health->body, "NOT_SERVING\n");
  metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);

  watch_ctx.TryCancel();
  EXPECT_EQ(daemon.process().Wait(absl::Seconds(20)), 0) << daemon.Output();
  httplib::Client after("127.0.0.1", metrics_port);
  after.set_connection_timeout(1);
  EXPECT_FALSE(after.Get("/health")) << "metrics port still open after exit";
}

TEST(MetricsEndpointTest, MetricsPortInUseExitsOneWithClearError) {
  TakenPort taken;
  ASSERT_GT(taken.port(), 0);
  Subprocess p;
  ASSERT_TRUE(
      p.Start({testing::RunfilePath("server/expertd"), std::string("--model_dir=") + kModel,
               "--listen=127.0.0.1:0", absl::StrCat("--metrics_listen=127.0.0.1:", taken.port())},
              ::testing::TempDir() + "/metrics_in_use.log"));
  EXPECT_EQ(p.Wait(absl::Seconds(20)), 1) << p.Output();
  EXPECT_NE(p.Output().find(absl::StrCat("expertd: cannot listen on '127.0.0.1:", taken.port(),
                                         "' for metrics: Address already in use")),
            std::string::npos)
      << p.Output();
}

TEST(MetricsEndpointTest, GrpcPortOfAnotherDaemonIsNotShared) {
  ExpertdProcess first;
  ASSERT_TRUE(first.Start(kModel, {}, ::testing::TempDir()).ok());
  EXPECT_TRUE(first.LogLines("metrics listening").empty())
      << "metrics must be off without --metrics_listen";
  Subprocess second;
  ASSERT_TRUE(second.Start({testing::RunfilePath("server/expertd"),
                            std::string("--model_dir=") + kModel, "--listen=" + first.address()},
                           ::testing::TempDir() + "/grpc_in_use.log"));
  EXPECT_EQ(second.Wait(absl::Seconds(20)), 1) << second.Output();
  EXPECT_NE(second.Output().find("cannot listen on '" + first.address() + "'"), std::string::npos)
      << second.Output();
}

}  // namespace
}  // namespace expertd
