// RequestRunner: starts Generate streams with gRPC's callback API (one
// ClientReadReactor per call, no thread per request, so thousands can be in
// flight) spread round-robin over a few channels, and timestamps every
// streamed message with the monotonic clock the moment it is delivered.
//
// Thread safety: every method may be called from any thread. `done` callbacks
// run on gRPC's threads, one per call, after which the runner forgets the call.
#ifndef EXPERTD_CLIENT_BENCH_REQUEST_RUNNER_H_
#define EXPERTD_CLIENT_BENCH_REQUEST_RUNNER_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "client/bench/request_record.h"
#include "client/bench/workload.h"
#include "grpcpp/grpcpp.h"
#include "proto/expertd.grpc.pb.h"

namespace expertd::bench {

using Clock = std::chrono::steady_clock;

struct RequestOptions {
  std::string model;          // GenerateRequest.model ("" = the served model)
  double temperature = 0;     // 0 = greedy
  double top_p = 1;
  int64_t top_k = 0;
  bool ignore_eos = false;
  double timeout_s = 600;     // per-request deadline
};

// The GenerateRequest for a planned request.
v1::GenerateRequest BuildGenerateRequest(const PlannedRequest& planned, const RequestOptions& options);

class GenerateCall;

class RequestRunner {
 public:
  using DoneFn = std::function<void(RequestRecord)>;

  // `channels` non-empty; `t0` is the time origin of every record.
  RequestRunner(std::vector<std::shared_ptr<grpc::Channel>> channels, Clock::time_point t0, double timeout_s);
  ~RequestRunner();  // REQUIRES: no call in flight.

  // Sets record.start_s and starts the call; `done` gets the finished record.
  void Start(const v1::GenerateRequest& request, RequestRecord record, DoneFn done);
  // Cancels every call in flight; they end with outcome "cancelled".
  void CancelAll();
  size_t in_flight() const;

  double Now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  Clock::time_point t0() const { return t0_; }

 private:
  friend class GenerateCall;
  void Finished(GenerateCall* call);

  const Clock::time_point t0_;
  const double timeout_s_;
  std::vector<std::unique_ptr<v1::InferenceService::Stub>> stubs_;
  mutable absl::Mutex mu_;
  size_t next_stub_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<GenerateCall*, std::shared_ptr<GenerateCall>> in_flight_ ABSL_GUARDED_BY(mu_);
};

// `n` channels to `address` that do not share a connection (each has its own
// subchannel pool), so load spreads over n HTTP/2 connections.
std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const std::string& address, int n);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_REQUEST_RUNNER_H_
