// Small gRPC callback-API helpers shared by the services.
#ifndef EXPERTD_SERVER_REACTORS_H_
#define EXPERTD_SERVER_REACTORS_H_

#include "grpcpp/grpcpp.h"

namespace expertd::server {

// A server-streaming reactor that ends the call at once with `status` (used
// for requests rejected before any message is written). Deletes itself.
template <typename Response>
class FinishedWriteReactor : public grpc::ServerWriteReactor<Response> {
 public:
  explicit FinishedWriteReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// A client-streaming reactor that ends the call at once with `status`
// (requests rejected before any message is read). Deletes itself.
template <typename Request>
class FinishedReadReactor : public grpc::ServerReadReactor<Request> {
 public:
  explicit FinishedReadReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// Finishes a unary call via the context's default reactor.
inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx,
                                             grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_REACTORS_H_
