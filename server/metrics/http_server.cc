#include "server/metrics/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/metrics/http_request.h"

namespace expertd::server::metrics {
namespace {

absl::Status SplitHostPort(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  int p = -1;
  if (colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(listen.substr(colon + 1), &p) ||
      p < 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", listen, "' is not host:port"));
  }
  *host = listen.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  *port = p;
  return absl::OkStatus();
}

bool SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// A listening, non-blocking socket on host:port, or why not.
absl::StatusOr<int> Listen(const std::string& listen, const std::string& host, int port,
                           int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int gai = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", listen, "' for metrics: ", gai_strerror(gai)));
  }
  std::string error = "no address";
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int yes = 1;  // quick restarts; never SO_REUSEPORT (two daemons on one port)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0 ||
        !SetNonBlocking(fd)) {
      error = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", listen, "' for metrics: ", error));
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = addr.ss_family == AF_INET6
                    ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                    : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
  }
  return "Error";
}

}  // namespace

// The event loop: the listening socket, an eventfd to stop it, connections.
class MetricsHttpServer::Loop {
 public:
  Loop(int listen_fd, int wake_fd, const MetricsHttpServer* owner)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), owner_(owner) {}
  ~Loop() {
    for (Conn& c : conns_) close(c.fd);
    close(listen_fd_);
    close(wake_fd_);
  }

  void Run();
  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }

 private:
  struct Conn {
    int fd;
    std::string in;
    std::string out;
    size_t out_sent = 0;
    bool close_after_write = false;
    bool has_request_bytes = false;  // part of a request head arrived
    absl::Time deadline;             // closed when it passes
  };
  using ConnIt = std::list<Conn>::iterator;

  void Accept(absl::Time now);
  // Returns false when the connection is to be closed.
  bool OnReadable(Conn& c, absl::Time now);
  bool OnWritable(Conn& c, absl::Time now);
  void HandleRequests(Conn& c, absl::Time now);
  void Respond(Conn& c, const HttpRequestHead* head, int status, const std::string& type,
               const std::string& body);
  void CloseOldestIdle();

  const int listen_fd_;
  const int wake_fd_;
  const MetricsHttpServer* const owner_;
  std::list<Conn> conns_;
  bool stop_ = false;
};

void MetricsHttpServer::Loop::Run() {
  std::vector<pollfd> fds;
  std::vector<ConnIt> order;
  while (!stop_) {
    fds.clear();
    order.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    absl::Time next = absl::InfiniteFuture();
    for (auto it = conns_.begin(); it != conns_.end(); ++it) {
      const bool writing = it->out_sent < it->out.size();
      fds.push_back({it->fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0});
      order.push_back(it);
      next = std::min(next, it->deadline);
    }
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(
          std::clamp<int64_t>(absl::ToInt64Milliseconds(next - absl::Now()) + 1, 0, 60 * 1000));
    }
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) break;
    const absl::Time now = absl::Now();
    if (fds[0].revents & POLLIN) {
      stop_ = true;
      break;
    }
    for (size_t i = 0; i < order.size(); ++i) {
      Conn& c = *order[i];
      bool keep = true;
      if (fds[i + 2].revents & (POLLERR | POLLNVAL)) {
        keep = false;
      } else if (fds[i + 2].revents & POLLOUT) {
        keep = OnWritable(c, now);
      } else if (fds[i + 2].revents & (POLLIN | POLLHUP)) {
        keep = OnReadable(c, now);
      } else if (now >= c.deadline) {
        keep = false;  // timed out: idle, slow head, or stalled reader
      }
      if (!keep) {
        close(c.fd);
        conns_.erase(order[i]);
      }
    }
    if (fds[1].revents & POLLIN) Accept(now);
  }
}

void MetricsHttpServer::Loop::Accept(absl::Time now) {
  const HttpServerOptions& o = owner_->options_;
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN (drained), or a transient error: poll again
    if (static_cast<int>(conns_.size()) >= o.max_connections) CloseOldestIdle();
    conns_.push_back(Conn{fd, {}, {}, 0, false, false, now + o.request_timeout});
  }
}

void MetricsHttpServer::Loop::CloseOldestIdle() {
  // The connection with the earliest deadline among those not mid-response.
  auto victim = conns_.end();
  for (auto it = conns_.begin(); it != conns_.end(); ++it) {
    if (it->out_sent < it->out.size()) continue;
    if (victim == conns_.end() || it->deadline < victim->deadline) victim = it;
  }
  if (victim == conns_.end()) victim = conns_.begin();
  close(victim->fd);
  conns_.erase(victim);
}

bool MetricsHttpServer::Loop::OnReadable(Conn& c, absl::Time now) {
  char buf[4096];
  const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
  if (n == 0) return false;  // the client closed
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (!c.has_request_bytes) {
    c.has_request_bytes = true;
    c.deadline = now + owner_->options_.request_timeout;  // the head must follow promptly
  }
  c.in.append(buf, static_cast<size_t>(n));
  HandleRequests(c, now);
  return true;
}

bool MetricsHttpServer::Loop::OnWritable(Conn& c, absl::Time now) {
  const ssize_t n = send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  c.out_sent += static_cast<size_t>(n);
  if (c.out_sent < c.out.size()) return true;
  c.out.clear();
  c.out_sent = 0;
  if (c.close_after_write) return false;
  c.deadline = now + owner_->options_.idle_timeout;
  HandleRequests(c, now);  // a pipelined request may be waiting
  return true;
}

void MetricsHttpServer::Loop::HandleRequests(Conn& c, absl::Time now) {
  const HttpServerOptions& o = owner_->options_;
  // One response at a time: the next pipelined request waits for the write.
  if (c.out_sent < c.out.size() || c.close_after_write) return;
  HttpRequestHead head;
  size_t consumed = 0;
  switch (ParseHttpRequestHead(c.in, o.max_head_bytes, &head, &consumed)) {
    case HttpParse::kIncomplete:
      if (c.in.empty()) c.has_request_bytes = false;
      return;
    case HttpParse::kBad:
      c.close_after_write = true;
      Respond(c, nullptr, 400, "text/plain; charset=utf-8", "bad request\n");
      return;
    case HttpParse::kTooLarge:
      c.close_after_write = true;
      Respond(c, nullptr, 431, "text/plain; charset=utf-8", "request head too large\n");
      return;
    case HttpParse::kComplete:
      break;
  }
  c.in.erase(0, consumed);
  c.has_request_bytes = !c.in.empty();
  c.close_after_write =
      !head.keep_alive || head.has_body;  // bodies are not read: close after answering
  if (head.method != "GET" && head.method != "HEAD") {
    Respond(c, &head, 405, "text/plain; charset=utf-8", "only GET and HEAD\n");
  } else if (head.path == "/metrics") {
    Respond(c, &head, 200, kTextContentType, owner_->registry_->Render());
  } else if (head.path == "/health") {
    const bool ok = owner_->serving_();
    Respond(c, &head, ok ? 200 : 503, "text/plain; charset=utf-8",
            ok ? "SERVING\n" : "NOT_SERVING\n");
  } else {
    Respond(c, &head, 404, "text/plain; charset=utf-8", "not found\n");
  }
  c.deadline = now + o.write_timeout;
}

void MetricsHttpServer::Loop::Respond(Conn& c, const HttpRequestHead* head, int status,
                                      const std::string& type, const std::string& body) {
  const bool head_only = head != nullptr && head->method == "HEAD";
  c.out = absl::StrCat("HTTP/1.1 ", status, " ", Reason(status), "\r\nContent-Type: ", type,
                       "\r\nContent-Length: ", body.size(), "\r\n",
                       c.close_after_write ? "Connection: close\r\n" : "", "\r\n",
                       head_only ? "" : body);
  c.out_sent = 0;
  if (status == 405) c.out.insert(c.out.find("\r\n\r\n") + 2, "Allow: GET, HEAD\r\n");
  c.deadline = absl::Now() + owner_->options_.write_timeout;
}

MetricsHttpServer::MetricsHttpServer(const Registry* registry, std::function<bool()> serving,
                                     HttpServerOptions options)
    : registry_(registry), serving_(std::move(serving)), options_(options) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start(const std::string& listen) {
  if (loop_ != nullptr) return absl::FailedPreconditionError("metrics server already started");
  std::string host;
  int port = 0;
  absl::Status s = SplitHostPort(listen, &host, &port);
  if (!s.ok()) return s;
  int bound = 0;
  absl::StatusOr<int> fd = Listen(listen, host, port, &bound);
  if (!fd.ok()) return fd.status();
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(*fd);
    return absl::UnavailableError(absl::StrCat("metrics: eventfd: ", std::strerror(errno)));
  }
  port_ = bound;
  loop_ = std::make_unique<Loop>(*fd, wake, this);
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (loop_ == nullptr) return;
  loop_->Wake();
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

}  // namespace expertd::server::metrics
