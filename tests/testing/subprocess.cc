#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"

namespace expertd::testing {

Subprocess::~Subprocess() {
  if (running()) {
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
}

bool Subprocess::Start(const std::vector<std::string>& argv, const std::string& output_path) {
  output_path_ = output_path;
  pid_ = fork();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    int fd = open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    // The test runner may block signals; the child starts with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return true;
}

void Subprocess::Signal(int signal) {
  if (running()) kill(pid_, signal);
}

int Subprocess::Wait(absl::Duration timeout) {
  if (exited_) return exit_code_;
  if (pid_ <= 0) return -1;
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      term_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + term_signal_;
      return exit_code_;
    }
    if (absl::Now() >= deadline) return -1;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string Subprocess::Output() const {
  std::ifstream in(output_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int WaitForPortFile(const std::string& path, absl::Duration timeout, const std::string& key) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(path);
    std::string text;
    if (in && std::getline(in, text)) {
      // {"grpc_port":N,"metrics_port":M}: written atomically, so a complete
      // line is the whole file.
      const std::string quoted = "\"" + key + "\":";
      const size_t at = text.find(quoted);
      int port = 0;
      if (at != std::string::npos) {
        const size_t begin = at + quoted.size();
        const size_t end = text.find_first_of(",}", begin);
        if (end != std::string::npos &&
            absl::SimpleAtoi(absl::StripAsciiWhitespace(text.substr(begin, end - begin)), &port) &&
            port > 0) {
          return port;
        }
      } else if (text.find('}') != std::string::npos) {
        return 0;  // complete, but this listener is not enabled
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return std::string(srcdir) + "/" + workspace + "/" + workspace_relative;
  }
  return workspace_relative;
}

}  // namespace expertd::testing
