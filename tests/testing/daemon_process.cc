#include "tests/testing/daemon_process.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace expertd::testing {

bool DaemonProcess::Start(const std::string& model_dir, const std::vector<std::string>& extra, std::string* error) {
  static std::atomic<int> counter{0};
  const std::string tmp = std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string tag = absl::StrCat(getpid(), "_", counter.fetch_add(1));
  const std::string port_file = absl::StrCat(tmp, "/port_", tag);
  std::remove(port_file.c_str());
  const std::string token_file = absl::StrCat(tmp, "/admin_token_", tag);
  std::ofstream(token_file) << kTestAdminToken << "\n";
  std::vector<std::string> argv = {RunfilePath("server/expertd"),
                                   "--model_dir=" + model_dir,
                                   "--listen=127.0.0.1:0",
                                   "--port_file=" + port_file,
                                   "--admin_token_file=" + token_file,
                                   "--shutdown_grace_seconds=2",
                                   "--threads=2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (!process_.Start(argv, absl::StrCat(tmp, "/expertd_", tag, ".log"))) {
    *error = "fork/exec failed";
    return false;
  }
  port_ = WaitForPortFile(port_file, absl::Seconds(60));
  if (port_ == 0) {
    *error = "no port file; daemon output:\n" + process_.Output();
    return false;
  }
  channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
  return true;
}

std::string DaemonProcess::Health(const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return "error: " + s.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

bool DaemonProcess::WaitUntilServing(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Health("") == "SERVING") return true;
    if (!process_.running() || process_.Wait(absl::ZeroDuration()) >= 0) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

}  // namespace expertd::testing
