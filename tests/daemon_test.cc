// Integration test: the real expertd binary on a free localhost port, called
// over gRPC (Health, GetModelInfo, GetServerInfo, admin auth), then SIGTERM.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>

#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/subprocess.h"

namespace expertd {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using testing::Subprocess;

constexpr char kAdminToken[] = "test-admin-token-0123456789";

class DaemonTest : public ::testing::Test {
 protected:
  void StartDaemon(const std::string& model_dir, std::vector<std::string> extra = {}) {
    const std::string tmp = ::testing::TempDir();
    port_file_ = tmp + "/port_" + std::to_string(getpid());
    std::remove(port_file_.c_str());
    std::string token_file = tmp + "/admin_token";
    std::ofstream(token_file) << kAdminToken << "\n";
    std::vector<std::string> argv = {testing::RunfilePath("server/expertd"),
                                     "--model_dir=" + model_dir,
                                     "--listen=127.0.0.1:0",
                                     "--port_file=" + port_file_,
                                     "--admin_token_file=" + token_file,
                                     "--shutdown_grace_seconds=2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_TRUE(daemon_.Start(argv, tmp + "/expertd_output.log"));
    int port = testing::WaitForPortFile(port_file_, absl::Seconds(30));
    ASSERT_GT(port, 0) << "daemon never wrote its port; output:\n" << daemon_.Output();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
  }

  HealthCheckResponse::ServingStatus Health(const std::string& service) {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    grpc::Status s = stub->Check(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.status();
  }

  void WaitUntilServing() {
    absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (Health("") != HealthCheckResponse::SERVING) {
      ASSERT_LT(absl::Now(), deadline) << "never became SERVING; output:\n" << daemon_.Output();
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

  std::string port_file_;
  Subprocess daemon_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(DaemonTest, ServesHealthAndModelInfoThenDrainsOnSigterm) {
  StartDaemon("tests/data/fixtures/qwen2_moe_mixed");
  WaitUntilServing();
  EXPECT_EQ(Health("expertd.v1.InferenceService"), HealthCheckResponse::SERVING);

  auto stub = v1::InferenceService::NewStub(channel_);
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    grpc::Status s = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(info.model_name(), "qwen2_moe_mixed");
    EXPECT_EQ(info.architecture(), "Qwen2MoeForCausalLM");
    EXPECT_EQ(info.model_type(), "qwen2_moe");
    EXPECT_EQ(info.num_layers(), 3u);
    EXPECT_EQ(info.num_experts(), 8u);
    EXPECT_EQ(info.experts_per_token(), 2u);
    EXPECT_EQ(info.num_moe_layers(), 2u);  // layer 1 is dense (mlp_only_layers)
    EXPECT_EQ(info.expert_intermediate_size(), 96u);
    EXPECT_EQ(info.shared_expert_intermediate_size(), 192u);
    EXPECT_EQ(info.vocab_size(), 512u);
    EXPECT_EQ(info.dtype(), "float32");
    ASSERT_EQ(info.eos_token_ids_size(), 1);
    EXPECT_EQ(info.eos_token_ids(0), 2u);
    EXPECT_GT(info.total_params(), info.active_params_per_token());
    EXPECT_EQ(info.placement().expert_weight_bytes(), info.expert_params() * 4);
  }
  {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    ASSERT_TRUE(stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
    EXPECT_TRUE(info.ready());
    EXPECT_FALSE(info.draining());
    EXPECT_FALSE(info.version().empty());
  }

  auto admin = v1::AdminService::NewStub(channel_);
  {
    grpc::ClientContext ctx;  // no token
    v1::FineTuneJob job;
    EXPECT_EQ(admin->GetFineTuneJob(&ctx, v1::GetFineTuneJobRequest(), &job).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong-token-wrong-token");
    v1::FineTuneJob job;
    EXPECT_EQ(admin->GetFineTuneJob(&ctx, v1::GetFineTuneJobRequest(), &job).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }

  daemon_.Signal(SIGTERM);
  EXPECT_EQ(daemon_.Wait(absl::Seconds(20)), 0) << daemon_.Output();
  const std::string out = daemon_.Output();
  EXPECT_NE(out.find("\"msg\":\"model ready\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"msg\":\"draining\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"msg\":\"stopped\""), std::string::npos) << out;
}

TEST_F(DaemonTest, BadFlagsExitTwoWithTheFlagNamed) {
  Subprocess p;
  ASSERT_TRUE(p.Start({testing::RunfilePath("server/expertd"), "--listen=127.0.0.1:0"},
                      ::testing::TempDir() + "/noflags.log"));
  EXPECT_EQ(p.Wait(absl::Seconds(20)), 2);
  EXPECT_NE(p.Output().find("--model_dir: is required"), std::string::npos) << p.Output();

  Subprocess q;
  ASSERT_TRUE(q.Start({testing::RunfilePath("server/expertd"), "--model_dir=/no/such/model"},
                      ::testing::TempDir() + "/nodir.log"));
  EXPECT_EQ(q.Wait(absl::Seconds(20)), 2);
  EXPECT_NE(q.Output().find("is not a directory"), std::string::npos) << q.Output();
}

TEST_F(DaemonTest, InvalidModelDirectoryExitsOneWithClearError) {
  const std::string dir = ::testing::TempDir() + "/broken_model";
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/config.json") << R"({"architectures": ["BertModel"], "vocab_size": 10})";
  Subprocess p;
  ASSERT_TRUE(p.Start(
      {testing::RunfilePath("server/expertd"), "--model_dir=" + dir, "--listen=127.0.0.1:0"},
      ::testing::TempDir() + "/broken.log"));
  EXPECT_EQ(p.Wait(absl::Seconds(20)), 1);
  EXPECT_NE(p.Output().find("unsupported architecture 'BertModel'"), std::string::npos)
      << p.Output();

  const std::string empty = ::testing::TempDir() + "/empty_model";
  mkdir(empty.c_str(), 0755);
  Subprocess q;
  ASSERT_TRUE(q.Start(
      {testing::RunfilePath("server/expertd"), "--model_dir=" + empty, "--listen=127.0.0.1:0"},
      ::testing::TempDir() + "/empty.log"));
  EXPECT_EQ(q.Wait(absl::Seconds(20)), 1);
  EXPECT_NE(q.Output().find("config.json"), std::string::npos) << q.Output();
}

}  // namespace
}  // namespace expertd
