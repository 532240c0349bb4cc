#include "tests/testing/expertd_process.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace expertd::testing {

absl::Status ExpertdProcess::Start(const std::string& model_dir,
                                   const std::vector<std::string>& extra_flags,
                                   const std::string& work_dir) {
  static int instance = 0;
  const std::string tag = absl::StrCat(getpid(), "_", instance++);
  const std::string port_file = absl::StrCat(work_dir, "/expertd_port_", tag);
  std::remove(port_file.c_str());
  std::vector<std::string> argv = {RunfilePath("server/expertd"), "--model_dir=" + model_dir,
                                   "--listen=127.0.0.1:0", "--port_file=" + port_file};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  if (!process_.Start(argv, absl::StrCat(work_dir, "/expertd_output_", tag, ".log"))) {
    return absl::InternalError("cannot start server/expertd");
  }
  port_ = WaitForPortFile(port_file, absl::Seconds(30));
  if (port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("expertd never wrote its port; output:\n", Output()));
  }
  metrics_port_ = WaitForPortFile(port_file, absl::Seconds(1), "metrics_port");
  admin_port_ = WaitForPortFile(port_file, absl::Seconds(1), "admin_port");
  http_port_ = WaitForPortFile(port_file, absl::Seconds(1), "http_port");
  return absl::OkStatus();
}

std::vector<std::string> ExpertdProcess::LogLines(const std::string& msg) const {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(Output(), '\n')) {
    nlohmann::json j =
        nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("msg", "") == msg) out.emplace_back(line);
  }
  return out;
}

std::shared_ptr<grpc::Channel> ExpertdProcess::channel() {
  if (channel_ == nullptr)
    channel_ = grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
  return channel_;
}

std::string ExpertdProcess::Health(const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return "error: " + s.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

bool ExpertdProcess::WaitUntilServing(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (Health("") == "SERVING") return true;
    if (process_.Wait(absl::ZeroDuration()) >= 0) return false;  // exited
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

}  // namespace expertd::testing
