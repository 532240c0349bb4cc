#include "server/metrics/http_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace expertd::server::metrics {
namespace {

constexpr int kWorkerThreads = 4;  // Prometheus, a probe, a human with curl

absl::Status SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  int p = -1;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(listen.substr(colon + 1), &p) || p < 0 ||
      p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", listen, "' is not host:port"));
  }
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  *port = p;
  return absl::OkStatus();
}

// cpp-httplib's default also sets SO_REUSEPORT, which would let two daemons
// share one port without an error. SO_REUSEADDR only allows quick restarts.
void SocketOptions(int sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(const Registry* registry, std::function<bool()> serving)
    : registry_(registry), serving_(std::move(serving)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start(const std::string& listen) {
  std::string host;
  int port = 0;
  absl::Status s = SplitHostPort(listen, &host, &port);
  if (!s.ok()) return s;

  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  http_->set_socket_options(SocketOptions);
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry_->Render(), kTextContentType);
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = serving_();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "SERVING\n" : "NOT_SERVING\n", "text/plain; charset=utf-8");
  });

  errno = 0;
  const int bound = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    const int err = errno;
    http_.reset();
    return absl::UnavailableError(absl::StrCat("cannot listen on '", listen, "' for metrics",
                                               err != 0 ? absl::StrCat(": ", std::strerror(err)) : std::string()));
  }
  port_ = bound;
  thread_ = std::thread([server = http_.get()] { server->listen_after_bind(); });
  // stop() is a no-op until the accept loop runs: wait for it, so an early
  // Stop() cannot leave the thread serving forever.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!http_->is_running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (http_ == nullptr) return;
  http_->stop();
  if (thread_.joinable()) thread_.join();
  http_.reset();
}

}  // namespace expertd::server::metrics
