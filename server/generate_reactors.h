// gRPC reactors for Generate (server streaming) and GenerateUnary: they
// submit a validated request to the Scheduler and turn its updates into
// responses. Both follow the callback API's rules: at most one write in
// flight, Finish exactly once, nothing touched after OnDone.
#ifndef EXPERTD_SERVER_GENERATE_REACTORS_H_
#define EXPERTD_SERVER_GENERATE_REACTORS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/expertd.pb.h"
#include "server/generation_update.h"
#include "server/request_log.h"
#include "server/scheduler.h"

namespace expertd::server {

// Fills a GenerateResponse-like message from an update (shared by both forms).
void AppendUpdate(const GenerationUpdate& u, v1::GenerateResponse* out);
void AppendUpdate(const GenerationUpdate& u, v1::GenerateUnaryResponse* out);
// gRPC status for a finished update (OK unless cancelled / deadline).
grpc::Status FinalStatus(const GenerationUpdate& u);
// Why gRPC cancelled a call: its deadline passed (DEADLINE_EXCEEDED) or the
// client went away (CANCELLED). gRPC reports both through OnCancel and the
// wire does not say which: the client's timer fires at its deadline, before
// ours, which is later by however long the call took to reach us (tens of
// milliseconds on a loaded machine). So a cancel in the last half of the
// call's timeout (at least 5 ms, at most 1 s before our deadline) counts as
// the deadline. `started`: when the call reached us.
absl::StatusCode CancelReason(absl::Time started, absl::Time deadline, absl::Time now);

// Called once with the status a call ends with and what it did (metrics,
// the request log line).
using RpcDone = std::function<void(const grpc::Status&, const RequestSummary&)>;

// Both reactors hold `keep_alive` (the model whose scheduler runs the
// request) until they are destroyed, so a model replaced by a checkpoint
// activation lives until its last request is done.
//
// Streaming. Shared-owned: by itself until OnDone, and by the scheduler
// (as the request's observer) until the request ends, so a late update
// never touches freed memory. Writes serialized GenerateResponses (the
// service takes raw bytes to decode requests itself).
class GenerateStreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                                    public GenerationObserver,
                                    public std::enable_shared_from_this<GenerateStreamReactor> {
 public:
  static GenerateStreamReactor* Create(std::shared_ptr<const void> keep_alive, Scheduler* scheduler,
                                       GenerationRequest request, RequestSummary summary,
                                       RpcDone done);
  // A call whose request is still being prepared (its prompt tokenized off
  // the serving threads): Start() must follow exactly once, from any thread.
  static GenerateStreamReactor* New(std::shared_ptr<const void> keep_alive, Scheduler* scheduler,
                                    absl::Time deadline, RequestSummary summary, RpcDone done);
  // Submits the validated request, or ends the call with its error, or with
  // the cancel or deadline that came while it was being prepared.
  void Start(absl::StatusOr<GenerationRequest> request);

  void OnUpdate(GenerationUpdate update) override;  // scheduler thread
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  GenerateStreamReactor(Scheduler* scheduler, absl::Time deadline, RequestSummary summary,
                        RpcDone done)
      : scheduler_(scheduler),
        deadline_(deadline),
        on_finish_(std::move(done)),
        summary_(std::move(summary)) {}
  void FinishWith(const grpc::Status& status);
  // Under mu_: decides the next network action. Returns true if `in_flight_`
  // should be written; sets *finish when the call should end instead.
  bool NextActionLocked(bool* finish, grpc::Status* status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Act();

  std::shared_ptr<const void> keep_alive_;  // set once, by Create
  Scheduler* const scheduler_;
  const absl::Time deadline_;  // the call's; OnCancel near it means DEADLINE_EXCEEDED
  const absl::Time started_ = absl::Now();
  const RpcDone on_finish_;
  std::shared_ptr<GenerateStreamReactor> self_;  // released in OnDone
  absl::Mutex mu_;
  RequestSummary summary_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<RequestHandle> handle_ ABSL_GUARDED_BY(mu_);
  std::string request_id_ ABSL_GUARDED_BY(mu_);
  v1::GenerateResponse pending_ ABSL_GUARDED_BY(mu_);  // accumulated, not yet written
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ByteBuffer in_flight_;  // owned by the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool final_seen_ ABSL_GUARDED_BY(mu_) = false;  // the last update arrived
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;  // OnCancel came (maybe before Start)
};

// Unary: collects every update into the response and finishes once (the
// response is written serialized into the raw call's ByteBuffer).
class GenerateUnaryReactor final : public grpc::ServerUnaryReactor,
                                   public GenerationObserver,
                                   public std::enable_shared_from_this<GenerateUnaryReactor> {
 public:
  static GenerateUnaryReactor* Create(std::shared_ptr<const void> keep_alive, Scheduler* scheduler,
                                      GenerationRequest request, RequestSummary summary,
                                      grpc::ByteBuffer* response, RpcDone done);
  // As GenerateStreamReactor::New and Start.
  static GenerateUnaryReactor* New(std::shared_ptr<const void> keep_alive, Scheduler* scheduler,
                                   absl::Time deadline, RequestSummary summary,
                                   grpc::ByteBuffer* response, RpcDone done);
  void Start(absl::StatusOr<GenerationRequest> request);

  void OnUpdate(GenerationUpdate update) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  GenerateUnaryReactor(Scheduler* scheduler, absl::Time deadline, RequestSummary summary,
                       grpc::ByteBuffer* response, RpcDone done)
      : scheduler_(scheduler),
        deadline_(deadline),
        response_(response),
        on_finish_(std::move(done)),
        summary_(std::move(summary)) {}
  void FinishWith(const grpc::Status& status);

  std::shared_ptr<const void> keep_alive_;  // set once, by Create
  Scheduler* const scheduler_;
  const absl::Time deadline_;
  const absl::Time started_ = absl::Now();
  grpc::ByteBuffer* const response_;  // owned by gRPC until OnDone
  const RpcDone on_finish_;
  std::shared_ptr<GenerateUnaryReactor> self_;
  absl::Mutex mu_;
  RequestSummary summary_ ABSL_GUARDED_BY(mu_);
  v1::GenerateUnaryResponse message_ ABSL_GUARDED_BY(mu_);  // serialized into *response_ at the end
  std::shared_ptr<RequestHandle> handle_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusCode cancelled_ ABSL_GUARDED_BY(mu_) = absl::StatusCode::kOk;  // OnCancel's reason
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_GENERATE_REACTORS_H_
