// absl::Status <-> grpc::Status. The codes are numerically identical.
#ifndef EXPERTD_SERVER_GRPC_STATUS_H_
#define EXPERTD_SERVER_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace expertd::server {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_GRPC_STATUS_H_
