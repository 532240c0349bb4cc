// Subprocess: runs a program (e.g. the real expertd binary) for integration
// tests. stdout+stderr go to a file the test can read. The destructor kills
// the process if it is still running.
#ifndef EXPERTD_TESTS_TESTING_SUBPROCESS_H_
#define EXPERTD_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace expertd::testing {

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Starts argv[0] with argv. Returns false if fork/exec failed.
  bool Start(const std::vector<std::string>& argv, const std::string& output_path);
  // Sends `signal` (e.g. SIGTERM).
  void Signal(int signal);
  // Waits up to `timeout` for exit. Returns the exit code, 128+signal if
  // killed by a signal, or -1 on timeout (the process keeps running).
  int Wait(absl::Duration timeout);
  // After Wait returned: the signal that killed the process, 0 if it exited
  // (so "exit(130)" and "killed by SIGINT" can be told apart).
  int term_signal() const { return term_signal_; }
  bool running() const { return pid_ > 0 && !exited_; }
  pid_t pid() const { return pid_; }
  // Everything the process printed so far.
  std::string Output() const;

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
  int term_signal_ = 0;
  std::string output_path_;
};

// Polls expertd's --port_file ({"grpc_port":N,"metrics_port":M}) until it
// is written, and returns the port under `key`; 0 on timeout or when the
// complete file has no such key (that listener is not enabled).
int WaitForPortFile(const std::string& path, absl::Duration timeout,
                    const std::string& key = "grpc_port");

// Path of a data dependency inside the test's runfiles, e.g. "server/expertd".
std::string RunfilePath(const std::string& workspace_relative);

}  // namespace expertd::testing

#endif  // EXPERTD_TESTS_TESTING_SUBPROCESS_H_
