// MetricsHttpServer: the daemon's plain-HTTP side port.
//
//   GET /metrics  the registry in Prometheus text format 0.0.4
//   GET /health   200 "SERVING" when serving() is true, else 503 "NOT_SERVING"
//                 (for tooling that can only do httpGet; gRPC health is the
//                 primary probe)
// Anything else is 404; methods other than GET and HEAD are 405.
//
// One event-loop thread (poll) serves every connection, so idle keep-alive
// connections, slow clients and half-sent requests never hold a worker: a
// probe is answered while any number of them are open. Each connection gets
// short deadlines (HttpServerOptions): a request head must arrive within
// request_timeout, a keep-alive connection may idle for idle_timeout, a
// response must drain within write_timeout; past them it is closed. Beyond
// max_connections, the connection idle the longest is closed to make room.
//
// The socket is bound without SO_REUSEPORT, so a port another process
// already listens on fails Start() instead of silently sharing it.
//
// Thread safety: Start/Stop from one thread; Render() and serving() are
// called on the loop thread.
#ifndef EXPERTD_SERVER_METRICS_HTTP_SERVER_H_
#define EXPERTD_SERVER_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/metrics/registry.h"

namespace expertd::server::metrics {

struct HttpServerOptions {
  absl::Duration request_timeout = absl::Seconds(5);  // accept/first byte -> complete head
  absl::Duration idle_timeout = absl::Seconds(10);    // keep-alive wait for the next request
  absl::Duration write_timeout = absl::Seconds(10);   // response fully sent
  int max_connections = 256;
  size_t max_head_bytes = 16 << 10;
};

class MetricsHttpServer {
 public:
  // `registry` is not owned and must outlive the server; so must whatever
  // `serving` reads.
  MetricsHttpServer(const Registry* registry, std::function<bool()> serving,
                    HttpServerOptions options = {});
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Listens on "host:port" ("[::]:9090" for IPv6; port 0 picks a free port)
  // and serves on a background thread. Returns only once the socket listens:
  // UNAVAILABLE when the address cannot be bound (in use, not local),
  // INVALID_ARGUMENT when it is not host:port.
  absl::Status Start(const std::string& listen);
  // The bound port; 0 before Start.
  int port() const { return port_; }
  // Stops serving, closes every connection and joins the thread. Idempotent.
  void Stop();

 private:
  class Loop;

  const Registry* const registry_;
  const std::function<bool()> serving_;
  const HttpServerOptions options_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace expertd::server::metrics

#endif  // EXPERTD_SERVER_METRICS_HTTP_SERVER_H_
