// Daemon: owns the gRPC server and the daemon's lifecycle.
//
//   Start()     checks the model directory (config.json must parse: a bad
//               directory fails here, before listening), starts the metrics
//               HTTP port when --metrics_listen is set, starts listening with
//               health NOT_SERVING, and loads the model on a background thread;
//               health turns SERVING when it is ready. A port already in use
//               (gRPC, admin, metrics or HTTP) fails Start with UNAVAILABLE.
//               With --admin_listen, AdminService is served only on that
//               port (with its own grpc.health.v1), so a network policy can
//               restrict it; without, it shares --listen.
//   Shutdown()  drains: health NOT_SERVING, new requests get UNAVAILABLE,
//               in-flight calls get shutdown_grace_seconds to finish, then the
//               server stops, then the metrics port (scrapes work during the
//               drain; /health answers 503). Idempotent.
//
// Thread safety: Start and Shutdown from one thread (main); the rest is safe.
#ifndef EXPERTD_SERVER_DAEMON_H_
#define EXPERTD_SERVER_DAEMON_H_

#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/grpcpp.h"
#include "server/admin_service.h"
#include "server/inference_service.h"
#include "server/metrics/http_server.h"
#include "server/metrics/serving_metrics.h"
#include "server/openai/openai_server.h"
#include "server/scheduler_metrics.h"
#include "server/serving_state.h"
#include "server/version.h"

namespace expertd::server {

class Daemon {
 public:
  explicit Daemon(ServerOptions options);
  ~Daemon();

  absl::Status Start();
  void Shutdown();

  int port() const { return port_; }
  // The port serving AdminService: --admin_listen's, or port() without it.
  int admin_port() const { return admin_server_ == nullptr ? port_ : admin_port_; }
  // The bound metrics port; 0 when --metrics_listen is empty.
  int metrics_port() const { return metrics_http_ == nullptr ? 0 : metrics_http_->port(); }
  // The bound OpenAI HTTP API port; 0 when --http_listen is empty.
  int http_port() const { return openai_http_ == nullptr ? 0 : openai_http_->port(); }
  // The daemon's metrics (see server/metrics/serving_metrics.h); always
  // collected, exported when --metrics_listen is set. Lives as long as the
  // daemon.
  ServingMetrics* metrics() { return &metrics_; }
  // True once background loading ended; load_status() then says how.
  bool load_finished() const { return load_done_.HasBeenNotified(); }
  absl::Status load_status() const;

 private:
  absl::Status LoadModel();
  void SetHealth(bool serving);
  // Builds the --admin_listen server; port 0 in admin_port_ when it cannot bind.
  std::unique_ptr<grpc::Server> StartAdminServer(
      const std::shared_ptr<grpc::ServerCredentials>& creds);
  void StopHttpListeners();

  ServingState state_;
  ServingMetrics metrics_;              // after state_: built from its options
  SchedulerMetrics scheduler_metrics_;  // feeds metrics_ from the scheduler
  InferenceServiceImpl inference_service_;
  AdminServiceImpl admin_service_;
  std::unique_ptr<metrics::MetricsHttpServer> metrics_http_;
  std::unique_ptr<openai::OpenAiServer> openai_http_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> admin_server_;  // null without --admin_listen
  int port_ = 0;
  int admin_port_ = 0;
  std::thread loader_;
  absl::Notification load_done_;
  absl::Status load_status_;  // written by loader_ before load_done_ is notified
  bool shut_down_ = false;
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_DAEMON_H_
