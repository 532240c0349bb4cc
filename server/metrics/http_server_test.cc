#include "server/metrics/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "httplib.h"

namespace expertd::server::metrics {
namespace {

TEST(MetricsHttpServerTest, ServesMetricsAndHealth) {
  Registry registry;
  registry.AddCounter("hits_total", "Hits.")->Get()->Increment(3);
  std::atomic<bool> serving{false};
  MetricsHttpServer server(&registry, [&] { return serving.load(); });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  ASSERT_GT(server.port(), 0);

  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res->body, "# HELP hits_total Hits.\n# TYPE hits_total counter\nhits_total 3\n");

  res = client.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "NOT_SERVING\n");
  serving = true;
  res = client.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "SERVING\n");

  res = client.Get("/nothing-here");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  server.Stop();
  server.Stop();  // idempotent
  httplib::Client after("127.0.0.1", server.port());
  after.set_connection_timeout(1);
  EXPECT_FALSE(after.Get("/metrics"));
}

TEST(MetricsHttpServerTest, PortInUseIsAClearError) {
  Registry registry;
  MetricsHttpServer first(&registry, [] { return true; });
  ASSERT_TRUE(first.Start("127.0.0.1:0").ok());
  MetricsHttpServer second(&registry, [] { return true; });
  absl::Status s = second.Start("127.0.0.1:" + std::to_string(first.port()));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("cannot listen on '127.0.0.1:" + std::to_string(first.port()) +
                             "' for metrics"),
            std::string::npos)
      << s;
}

TEST(MetricsHttpServerTest, RejectsAddressesThatAreNotHostPort) {
  Registry registry;
  MetricsHttpServer server(&registry, [] { return true; });
  EXPECT_EQ(server.Start("9090").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start("127.0.0.1:99999").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(server.Start("127.0.0.1:http").code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsHttpServerTest, StopRightAfterStartDoesNotHang) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    MetricsHttpServer server(&registry, [] { return true; });
    ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  }  // destructor stops
}

// True when this machine can bind [::1] at all (containers without IPv6).
bool HaveIpv6Loopback() {
  const int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// A raw TCP connection to 127.0.0.1:port (blocking); -1 on failure.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Waits up to `timeout_ms` for the server to close `fd` (recv returns 0).
bool ClosedByServer(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  while (poll(&p, 1, timeout_ms) == 1) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;
  }
  return false;
}

std::string RoundTrip(int fd, const std::string& request) {
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string out;
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  while (out.find("\r\n\r\n") == std::string::npos && poll(&p, 1, 5000) == 1) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A Kubernetes probe must never wait behind scrapers: idle keep-alive
// connections, half-sent requests and silent connections hold nothing.
TEST(MetricsHttpServerTest, IdleAndHalfOpenConnectionsNeverDelayHealth) {
  Registry registry;
  MetricsHttpServer server(&registry, [] { return true; });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {  // keep-alive connections left idle after a scrape
    const int fd = Connect(server.port());
    ASSERT_GE(fd, 0);
    EXPECT_NE(RoundTrip(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").find("200 OK"),
              std::string::npos);
    held.push_back(fd);
  }
  for (int i = 0; i < 8; ++i) {  // half-open: part of a request head, then silence
    const int fd = Connect(server.port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, "GET /hea", 8, MSG_NOSIGNAL), 8);
    held.push_back(fd);
  }
  for (int i = 0; i < 32; ++i) {  // connected, nothing sent
    const int fd = Connect(server.port());
    ASSERT_GE(fd, 0);
    held.push_back(fd);
  }
  httplib::Client probe("127.0.0.1", server.port());
  probe.set_connection_timeout(2);
  probe.set_read_timeout(2);  // a probe's timeout; the old server needed 5-30 s here
  for (int i = 0; i < 3; ++i) {
    auto res = probe.Get("/health");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
  }
  for (int fd : held) close(fd);
}

TEST(MetricsHttpServerTest, SlowAndIdleConnectionsAreClosedAfterTheirTimeouts) {
  Registry registry;
  HttpServerOptions o;
  o.request_timeout = absl::Milliseconds(100);
  o.idle_timeout = absl::Milliseconds(100);
  MetricsHttpServer server(
      &registry, [] { return true; }, o);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const int half = Connect(server.port());
  ASSERT_EQ(send(half, "GET /hea", 8, MSG_NOSIGNAL), 8);
  const int idle = Connect(server.port());
  EXPECT_NE(RoundTrip(idle, "GET /health HTTP/1.1\r\n\r\n").find("200 OK"), std::string::npos);
  EXPECT_TRUE(ClosedByServer(half, 10000));
  EXPECT_TRUE(ClosedByServer(idle, 10000));
  close(half);
  close(idle);
}

TEST(MetricsHttpServerTest, MoreConnectionsThanTheLimitEvictTheIdleOnes) {
  Registry registry;
  HttpServerOptions o;
  o.max_connections = 4;
  MetricsHttpServer server(
      &registry, [] { return true; }, o);
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  std::vector<int> held;
  for (int i = 0; i < 10; ++i) held.push_back(Connect(server.port()));
  const int fd = Connect(server.port());
  EXPECT_NE(RoundTrip(fd, "GET /health HTTP/1.1\r\n\r\n").find("200 OK"), std::string::npos);
  EXPECT_TRUE(ClosedByServer(held[0], 10000));
  for (int h : held) close(h);
  close(fd);
}

TEST(MetricsHttpServerTest, BadRequestsAndMethodsAndPipelining) {
  Registry registry;
  MetricsHttpServer server(&registry, [] { return false; });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  int fd = Connect(server.port());
  EXPECT_NE(RoundTrip(fd, "BLAH\r\n\r\n").find("HTTP/1.1 400"), std::string::npos);
  EXPECT_TRUE(ClosedByServer(fd, 10000));
  close(fd);
  fd = Connect(server.port());
  const std::string r = RoundTrip(fd, "DELETE /health HTTP/1.1\r\n\r\n");
  EXPECT_NE(r.find("HTTP/1.1 405"), std::string::npos) << r;
  EXPECT_NE(r.find("Allow: GET, HEAD"), std::string::npos) << r;
  // HEAD: headers only; then a pipelined pair on the same connection.
  const std::string h = RoundTrip(fd, "HEAD /health HTTP/1.1\r\n\r\n");
  EXPECT_NE(h.find("HTTP/1.1 503"), std::string::npos) << h;
  EXPECT_EQ(h.find("NOT_SERVING"), std::string::npos) << h;
  std::string both =
      RoundTrip(fd, "GET /health HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\nConnection: close\r\n\r\n");
  pollfd p{fd, POLLIN, 0};
  char buf[4096];
  while (both.find("HTTP/1.1 404") == std::string::npos && poll(&p, 1, 5000) == 1) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    both.append(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(both.find("HTTP/1.1 503"), std::string::npos) << both;
  EXPECT_NE(both.find("HTTP/1.1 404"), std::string::npos) << both;
  EXPECT_TRUE(ClosedByServer(fd, 10000));
  close(fd);
}

TEST(MetricsHttpServerTest, ServesIpv6Brackets) {
  if (!HaveIpv6Loopback()) GTEST_SKIP() << "no IPv6 loopback on this machine";
  Registry registry;
  MetricsHttpServer server(&registry, [] { return true; });
  absl::Status s = server.Start("[::1]:0");
  ASSERT_TRUE(s.ok()) << s;
  httplib::Client client("::1", server.port());
  auto res = client.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

}  // namespace
}  // namespace expertd::server::metrics
