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
  std::string model;       // GenerateRequest.model ("" = the served model)
  double temperature = 0;  // 0 = greedy
  double top_p = 1;
  int64_t top_k = 0;
  bool ignore_eos = false;
  double timeout_s = 600;  // per-request deadline
};

// The GenerateRequest for a planned request.
v1::GenerateRequest BuildGenerateRequest(const PlannedRequest& planned,
                                         const RequestOptions& options);

class GenerateCall;

// What the load driver needs from an API: start a generation, cancel all. The
// gRPC runner below; the OpenAI HTTP one in openai_runner.h.
class GenerateRunner {
 public:
  using DoneFn = std::function<void(RequestRecord)>;

  explicit GenerateRunner(Clock::time_point t0) : t0_(t0) {}
  virtual ~GenerateRunner() = default;

  // Sets record.start_s and starts the call; `done` gets the finished record.
  virtual void Start(const v1::GenerateRequest& request, RequestRecord record, DoneFn done) = 0;
  // Cancels every call in flight; they end with outcome "cancelled".
  virtual void CancelAll() = 0;
  virtual size_t in_flight() const = 0;

  double Now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  Clock::time_point t0() const { return t0_; }

 private:
  const Clock::time_point t0_;
};

class RequestRunner final : public GenerateRunner {
 public:
  // `channels` non-empty; `t0` is the time origin of every record.
  RequestRunner(std::vector<std::shared_ptr<grpc::Channel>> channels, Clock::time_point t0,
                double timeout_s);
  ~RequestRunner() override;  // REQUIRES: no call in flight.

  void Start(const v1::GenerateRequest& request, RequestRecord record, DoneFn done) override;
  void CancelAll() override;
  size_t in_flight() const override;

 private:
  friend class GenerateCall;
  void Finished(GenerateCall* call);

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
