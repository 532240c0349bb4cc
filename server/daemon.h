// Daemon: owns the gRPC server and the daemon's lifecycle.
//
//   Start()     checks the model directory (config.json must parse: a bad
//               directory fails here, before listening), starts listening with
//               health NOT_SERVING, and loads the model on a background thread;
//               health turns SERVING when it is ready.
//   Shutdown()  drains: health NOT_SERVING, new requests get UNAVAILABLE,
//               in-flight calls get shutdown_grace_seconds to finish, then the
//               server stops. Idempotent.
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
#include "server/serving_state.h"

namespace expertd::server {

class Daemon {
 public:
  explicit Daemon(ServerOptions options);
  ~Daemon();

  absl::Status Start();
  void Shutdown();

  int port() const { return port_; }
  // True once background loading ended; load_status() then says how.
  bool load_finished() const { return load_done_.HasBeenNotified(); }
  absl::Status load_status() const;

 private:
  absl::Status LoadModel();
  void SetHealth(bool serving);

  ServingState state_;
  InferenceServiceImpl inference_service_;
  AdminServiceImpl admin_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread loader_;
  absl::Notification load_done_;
  absl::Status load_status_;  // written by loader_ before load_done_ is notified
  bool shut_down_ = false;
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_DAEMON_H_
