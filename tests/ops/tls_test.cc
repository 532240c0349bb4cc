// Integration test: expertd with --tls_cert/--tls_key. A self-signed
// certificate is made at test time with the openssl CLI; a client trusting it
// gets Health and GetModelInfo, a plaintext client and a client trusting a
// different certificate both fail.
#include <signal.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/expertd.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/testing/expertd_process.h"

namespace expertd {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using testing::ExpertdProcess;
using testing::Subprocess;

constexpr char kOpenssl[] = "/usr/bin/openssl";  // Debian's `openssl` package (tools/setup.sh)

struct CertFiles {
  std::string cert;
  std::string key;
};

// A self-signed P-256 certificate for localhost / 127.0.0.1, valid two days.
CertFiles MakeSelfSignedCert(const std::string& name) {
  const std::string dir = ::testing::TempDir();
  CertFiles files{absl::StrCat(dir, "/", name, ".cert.pem"),
                  absl::StrCat(dir, "/", name, ".key.pem")};
  Subprocess openssl;
  EXPECT_TRUE(openssl.Start(
      {kOpenssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
       "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext",
       "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", files.key, "-out", files.cert},
      absl::StrCat(dir, "/", name, ".openssl.log")));
  EXPECT_EQ(openssl.Wait(absl::Seconds(30)), 0) << openssl.Output();
  return files;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address,
                                          const std::string& root_cert_path) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadAll(root_cert_path);
  return grpc::CreateChannel(address, grpc::SslCredentials(ssl));
}

grpc::Status Check(const std::shared_ptr<grpc::Channel>& channel, HealthCheckResponse* resp) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  return stub->Check(&ctx, HealthCheckRequest(), resp);
}

TEST(TlsTest, TrustedClientsConnectOthersDoNot) {
  const CertFiles server_cert = MakeSelfSignedCert("server");
  const CertFiles other_cert = MakeSelfSignedCert("other");
  ExpertdProcess daemon;
  ASSERT_TRUE(daemon
                  .Start("tests/data/fixtures/qwen2_moe_mixed",
                         {"--tls_cert=" + server_cert.cert, "--tls_key=" + server_cert.key,
                          "--shutdown_grace_seconds=1"},
                         ::testing::TempDir())
                  .ok());
  EXPECT_EQ(daemon.LogLines("listening").size(), 1u);
  EXPECT_NE(daemon.LogLines("listening")[0].find("\"tls\":true"), std::string::npos)
      << daemon.Output();

  auto trusted = TlsChannel(daemon.address(), server_cert.cert);
  HealthCheckResponse health;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {
    grpc::Status s = Check(trusted, &health);
    ASSERT_TRUE(s.ok()) << s.error_code() << " " << s.error_message() << "\n" << daemon.Output();
    if (health.status() == HealthCheckResponse::SERVING) break;
    ASSERT_LT(absl::Now(), deadline);
    absl::SleepFor(absl::Milliseconds(20));
  }
  {
    auto stub = v1::InferenceService::NewStub(trusted);
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    grpc::Status s = stub->GetModelInfo(&ctx, v1::GetModelInfoRequest(), &info);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(info.model_name(), "qwen2_moe_mixed");
  }
  // The certificate names localhost too.
  auto by_name = TlsChannel("localhost:" + std::to_string(daemon.port()), server_cert.cert);
  EXPECT_TRUE(Check(by_name, &health).ok());

  grpc::Status plaintext =
      Check(grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()), &health);
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE) << plaintext.error_message();

  grpc::Status untrusted = Check(TlsChannel(daemon.address(), other_cert.cert), &health);
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE) << untrusted.error_message();

  daemon.process().Signal(SIGTERM);
  EXPECT_EQ(daemon.process().Wait(absl::Seconds(20)), 0) << daemon.Output();
}

TEST(TlsTest, UnreadableKeyIsAFlagError) {
  const CertFiles cert = MakeSelfSignedCert("lonely");
  Subprocess p;
  ASSERT_TRUE(p.Start(
      {testing::RunfilePath("server/expertd"), "--model_dir=tests/data/fixtures/qwen2_moe_mixed",
       "--listen=127.0.0.1:0", "--tls_cert=" + cert.cert, "--tls_key=/no/such/key.pem"},
      ::testing::TempDir() + "/tls_bad_key.log"));
  EXPECT_EQ(p.Wait(absl::Seconds(20)), 2);
  EXPECT_NE(p.Output().find("--tls_key: cannot read '/no/such/key.pem'"), std::string::npos)
      << p.Output();
}

}  // namespace
}  // namespace expertd
