// MetricsHttpServer: the daemon's plain-HTTP side port (Debian's cpp-httplib).
//
//   GET /metrics  the registry in Prometheus text format 0.0.4
//   GET /health   200 "SERVING" when serving() is true, else 503 "NOT_SERVING"
//                 (for tooling that can only do httpGet; gRPC health is the
//                 primary probe)
// Anything else is 404. HEAD works on both paths.
//
// The socket is bound without SO_REUSEPORT (cpp-httplib sets it by default),
// so a port another process already listens on fails Start() instead of
// silently sharing it.
//
// Thread safety: Start/Stop from one thread; requests are answered on a small
// pool of worker threads that call Registry::Render() and serving().
#ifndef EXPERTD_SERVER_METRICS_HTTP_SERVER_H_
#define EXPERTD_SERVER_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "server/metrics/registry.h"

namespace httplib {
class Server;
}

namespace expertd::server::metrics {

class MetricsHttpServer {
 public:
  // `registry` is not owned and must outlive the server; so must whatever
  // `serving` reads.
  MetricsHttpServer(const Registry* registry, std::function<bool()> serving);
  ~MetricsHttpServer();  // Stop()
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Listens on "host:port" ("[::]:9090" for IPv6; port 0 picks a free port)
  // and serves on a background thread. UNAVAILABLE when the address cannot be
  // bound (in use, not local), INVALID_ARGUMENT when it is not host:port.
  absl::Status Start(const std::string& listen);
  // The bound port; 0 before Start.
  int port() const { return port_; }
  // Stops serving and joins the thread. Idempotent.
  void Stop();

 private:
  const Registry* const registry_;
  const std::function<bool()> serving_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace expertd::server::metrics

#endif  // EXPERTD_SERVER_METRICS_HTTP_SERVER_H_
