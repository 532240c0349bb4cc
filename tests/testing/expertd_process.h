// ExpertdProcess: the real expertd binary on free localhost ports, for
// integration tests. Ports are chosen by the daemon (port 0) and read back
// from --port_file (gRPC) and from its "metrics listening" log line (metrics),
// so parallel tests never collide.
#ifndef EXPERTD_TESTS_TESTING_EXPERTD_PROCESS_H_
#define EXPERTD_TESTS_TESTING_EXPERTD_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/subprocess.h"

namespace expertd::testing {

class ExpertdProcess {
 public:
  // Starts `server/expertd --model_dir=<model_dir> --listen=127.0.0.1:0
  // --port_file=... <extra_flags>` (extra flags may override --listen) with
  // its output in a file under `work_dir`, and waits until it has written its
  // gRPC port. The error carries the daemon's output.
  absl::Status Start(const std::string& model_dir, const std::vector<std::string>& extra_flags,
                     const std::string& work_dir);

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The metrics port from the --port_file; 0 without --metrics_listen.
  int MetricsPort() const { return metrics_port_; }
  // The port serving AdminService (port() without --admin_listen).
  int AdminPort() const { return admin_port_; }
  // The OpenAI HTTP API port; 0 without --http_listen.
  int HttpPort() const { return http_port_; }
  // JSON log lines whose "msg" equals `msg`, as raw text.
  std::vector<std::string> LogLines(const std::string& msg) const;

  // An insecure channel to the gRPC port (created on first use).
  std::shared_ptr<grpc::Channel> channel();
  // grpc.health.v1 status name ("SERVING", ...) or "error: <message>".
  std::string Health(const std::string& service);
  // Polls Health("") until SERVING; false on timeout or if the process exits.
  bool WaitUntilServing(absl::Duration timeout);

  Subprocess& process() { return process_; }
  std::string Output() const { return process_.Output(); }

 private:
  Subprocess process_;
  int port_ = 0;
  int metrics_port_ = 0;
  int admin_port_ = 0;
  int http_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace expertd::testing

#endif  // EXPERTD_TESTS_TESTING_EXPERTD_PROCESS_H_
