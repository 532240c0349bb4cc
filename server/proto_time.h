// absl time -> google.protobuf.Duration, for every message the server fills.
#ifndef EXPERTD_SERVER_PROTO_TIME_H_
#define EXPERTD_SERVER_PROTO_TIME_H_

#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"

namespace expertd::server {

inline void ToProtoDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_PROTO_TIME_H_
