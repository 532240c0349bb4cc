// DaemonProcess: the real expertd binary started for a test on a free
// localhost port, with a gRPC channel to it.
#ifndef EXPERTD_TESTS_TESTING_DAEMON_PROCESS_H_
#define EXPERTD_TESTS_TESTING_DAEMON_PROCESS_H_

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "tests/testing/subprocess.h"

namespace expertd::testing {

inline constexpr char kTestAdminToken[] = "test-admin-token-0123456789";

class DaemonProcess {
 public:
  // Starts expertd on `model_dir` with --listen=127.0.0.1:0 plus `extra`
  // flags, waits for its port file (not for SERVING). Returns false with the
  // daemon's output in *error on failure.
  bool Start(const std::string& model_dir, const std::vector<std::string>& extra, std::string* error);
  // Polls Health("") until SERVING (true) or the timeout.
  bool WaitUntilServing(absl::Duration timeout);
  // Health status name ("SERVING", "NOT_SERVING", ...) or the RPC error.
  std::string Health(const std::string& service);

  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  int port() const { return port_; }
  Subprocess& process() { return process_; }

 private:
  Subprocess process_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0;
};

}  // namespace expertd::testing

#endif  // EXPERTD_TESTS_TESTING_DAEMON_PROCESS_H_
