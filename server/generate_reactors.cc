#include "server/generate_reactors.h"

#include <algorithm>

#include "server/grpc_status.h"
#include "server/proto_time.h"

namespace expertd::server {
namespace {

grpc::ByteBuffer Serialize(const google::protobuf::MessageLite& m) {
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return v1::FINISH_REASON_UNSPECIFIED;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

// Shared by both response types (same field names and numbers).
template <typename Response>
void AppendUpdateImpl(const GenerationUpdate& u, Response* out) {
  for (int32_t id : u.token_ids) out->add_token_ids(static_cast<uint32_t>(id));
  out->mutable_text()->append(u.text);
  for (const TokenLogprobs& lp : u.logprobs) {
    v1::TokenLogprob* p = out->add_logprobs();
    p->set_token_id(static_cast<uint32_t>(lp.token_id));
    p->set_logprob(lp.logprob);
    for (const auto& [id, logprob] : lp.top) {
      v1::TopLogprob* t = p->add_top();
      t->set_token_id(static_cast<uint32_t>(id));
      t->set_logprob(logprob);
    }
  }
  if (!u.finished) return;
  out->set_finish_reason(ToProto(u.finish_reason));
  if (!u.matched_stop_string.empty()) out->set_matched_stop_string(u.matched_stop_string);
  if (u.matched_stop_token_id >= 0)
    out->set_matched_stop_token_id(static_cast<uint32_t>(u.matched_stop_token_id));
  if (!u.error_message.empty()) out->set_error_message(u.error_message);
  v1::Usage* usage = out->mutable_usage();
  usage->set_prompt_tokens(u.prompt_tokens);
  usage->set_completion_tokens(u.completion_tokens);
  usage->set_total_tokens(u.prompt_tokens + u.completion_tokens);
  v1::Timing* t = out->mutable_timing();
  ToProtoDuration(u.timing.queue_time, t->mutable_queue_time());
  ToProtoDuration(u.timing.time_to_first_token, t->mutable_time_to_first_token());
  ToProtoDuration(u.timing.decode_time, t->mutable_decode_time());
  ToProtoDuration(u.timing.total_time, t->mutable_total_time());
}

}  // namespace

void AppendUpdate(const GenerationUpdate& u, v1::GenerateResponse* out) {
  AppendUpdateImpl(u, out);
}
void AppendUpdate(const GenerationUpdate& u, v1::GenerateUnaryResponse* out) {
  AppendUpdateImpl(u, out);
}

grpc::Status FinalStatus(const GenerationUpdate& u) { return ToGrpcStatus(u.status); }

absl::StatusCode CancelReason(absl::Time started, absl::Time deadline, absl::Time now) {
  if (deadline == absl::InfiniteFuture()) return absl::StatusCode::kCancelled;
  const absl::Duration slack =
      std::clamp((deadline - started) / 2, absl::Milliseconds(5), absl::Seconds(1));
  return now + slack >= deadline ? absl::StatusCode::kDeadlineExceeded
                                 : absl::StatusCode::kCancelled;
}

namespace {

grpc::Status CancelStatus(absl::StatusCode why) {
  return why == absl::StatusCode::kDeadlineExceeded
             ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "deadline exceeded")
             : grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
}

}  // namespace

// ---------------------------------------------------------------------------
// Streaming

void GenerateStreamReactor::FinishWith(const grpc::Status& status) {
  if (on_finish_) {
    RequestSummary summary;
    {
      absl::MutexLock lock(&mu_);
      summary = summary_;
    }
    on_finish_(status, summary);
  }
  Finish(status);
}

GenerateStreamReactor* GenerateStreamReactor::Create(std::shared_ptr<const void> keep_alive,
                                                     Scheduler* scheduler,
                                                     GenerationRequest request,
                                                     RequestSummary summary, RpcDone done) {
  GenerateStreamReactor* r =
      New(std::move(keep_alive), scheduler, request.deadline, std::move(summary), std::move(done));
  r->Start(std::move(request));
  return r;
}

GenerateStreamReactor* GenerateStreamReactor::New(std::shared_ptr<const void> keep_alive,
                                                  Scheduler* scheduler, absl::Time deadline,
                                                  RequestSummary summary, RpcDone done) {
  std::shared_ptr<GenerateStreamReactor> r(
      new GenerateStreamReactor(scheduler, deadline, std::move(summary), std::move(done)));
  r->keep_alive_ = std::move(keep_alive);
  r->self_ = r;
  return r.get();
}

void GenerateStreamReactor::Start(absl::StatusOr<GenerationRequest> request) {
  grpc::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (request.ok()) {
      request_id_ = request->request_id;
      summary_.prompt_tokens = static_cast<int32_t>(request->prompt.size());
    }
    if (!request.ok()) {
      refused = ToGrpcStatus(request.status());
    } else if (cancelled_) {
      refused = final_status_;  // OnCancel's: CANCELLED or DEADLINE_EXCEEDED
    }
    if (!refused.ok()) finish_called_ = true;
  }
  if (!refused.ok()) return FinishWith(refused);
  absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
      scheduler_->Submit(*std::move(request), shared_from_this());
  if (!handle.ok()) {
    {
      absl::MutexLock lock(&mu_);
      finish_called_ = true;
    }
    return FinishWith(ToGrpcStatus(handle.status()));
  }
  absl::StatusCode cancelled_meanwhile = absl::StatusCode::kOk;
  {
    absl::MutexLock lock(&mu_);
    handle_ = *handle;
    if (cancelled_) cancelled_meanwhile = CancelReason(started_, deadline_, absl::Now());
  }
  if (cancelled_meanwhile != absl::StatusCode::kOk) {  // OnCancel saw no handle yet
    (*handle)->Cancel(cancelled_meanwhile);
    scheduler_->Notify();
  }
}

void GenerateStreamReactor::OnUpdate(GenerationUpdate u) {
  {
    absl::MutexLock lock(&mu_);
    if (finish_called_) return;
    if (u.finished) SummarizeFinalUpdate(u, &summary_);
    if (!u.status.ok()) {
      final_status_ = FinalStatus(u);
      final_seen_ = true;
    } else {
      AppendUpdate(u, &pending_);
      has_pending_ = true;
      final_seen_ = u.finished;
    }
  }
  Act();
}

bool GenerateStreamReactor::NextActionLocked(bool* finish, grpc::Status* status) {
  if (writing_ || finish_called_) return false;
  if (final_seen_ && !final_status_.ok()) {
    finish_called_ = true;
    *finish = true;
    *status = final_status_;
    return false;
  }
  if (has_pending_) {
    pending_.set_request_id(request_id_);
    in_flight_ = Serialize(pending_);
    pending_.Clear();
    has_pending_ = false;
    writing_ = true;
    return true;
  }
  if (final_seen_) {
    finish_called_ = true;
    *finish = true;
    *status = grpc::Status::OK;
  }
  return false;
}

void GenerateStreamReactor::Act() {
  bool finish = false;
  grpc::Status status;
  bool write;
  {
    absl::MutexLock lock(&mu_);
    write = NextActionLocked(&finish, &status);
  }
  if (write) {
    StartWrite(&in_flight_);
  } else if (finish) {
    FinishWith(status);
  }
}

void GenerateStreamReactor::OnWriteDone(bool ok) {
  if (!ok) {  // the client is gone: stop generating, end the call
    OnCancel();
    absl::MutexLock lock(&mu_);
    writing_ = false;
    has_pending_ = false;
    if (final_seen_ && final_status_.ok())
      final_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
    if (!final_seen_) return;  // the scheduler's final update will finish the call
  } else {
    absl::MutexLock lock(&mu_);
    writing_ = false;
  }
  Act();
}

void GenerateStreamReactor::OnCancel() {
  const absl::StatusCode why = CancelReason(started_, deadline_, absl::Now());
  std::shared_ptr<RequestHandle> handle;
  {
    absl::MutexLock lock(&mu_);
    handle = handle_;
    final_status_ = CancelStatus(why);
    cancelled_ = true;
  }
  if (handle != nullptr) {
    handle->Cancel(why);
    scheduler_->Notify();
  }
}

void GenerateStreamReactor::OnDone() {
  std::shared_ptr<GenerateStreamReactor> keep = std::move(self_);
  absl::MutexLock lock(&mu_);
  finish_called_ = true;  // late scheduler updates are dropped
}

// ---------------------------------------------------------------------------
// Unary

void GenerateUnaryReactor::FinishWith(const grpc::Status& status) {
  RequestSummary summary;
  {
    absl::MutexLock lock(&mu_);
    summary = summary_;
    if (status.ok()) *response_ = Serialize(message_);
  }
  if (on_finish_) on_finish_(status, summary);
  Finish(status);
}

GenerateUnaryReactor* GenerateUnaryReactor::Create(std::shared_ptr<const void> keep_alive,
                                                   Scheduler* scheduler, GenerationRequest request,
                                                   RequestSummary summary,
                                                   grpc::ByteBuffer* response, RpcDone done) {
  GenerateUnaryReactor* r =
      New(std::move(keep_alive), scheduler, request.deadline, std::move(summary), response,
          std::move(done));
  r->Start(std::move(request));
  return r;
}

GenerateUnaryReactor* GenerateUnaryReactor::New(std::shared_ptr<const void> keep_alive,
                                                Scheduler* scheduler, absl::Time deadline,
                                                RequestSummary summary,
                                                grpc::ByteBuffer* response, RpcDone done) {
  std::shared_ptr<GenerateUnaryReactor> r(new GenerateUnaryReactor(
      scheduler, deadline, std::move(summary), response, std::move(done)));
  r->keep_alive_ = std::move(keep_alive);
  r->self_ = r;
  return r.get();
}

void GenerateUnaryReactor::Start(absl::StatusOr<GenerationRequest> request) {
  grpc::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (request.ok()) {
      message_.set_request_id(request->request_id);
      summary_.prompt_tokens = static_cast<int32_t>(request->prompt.size());
    }
    if (!request.ok()) {
      refused = ToGrpcStatus(request.status());
    } else if (cancelled_ != absl::StatusCode::kOk) {
      refused = CancelStatus(cancelled_);
    }
    if (!refused.ok()) done_ = true;
  }
  if (!refused.ok()) return FinishWith(refused);
  absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
      scheduler_->Submit(*std::move(request), shared_from_this());
  if (!handle.ok()) {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    return FinishWith(ToGrpcStatus(handle.status()));
  }
  absl::StatusCode cancelled_meanwhile;
  {
    absl::MutexLock lock(&mu_);
    handle_ = *handle;
    cancelled_meanwhile = cancelled_;
  }
  if (cancelled_meanwhile != absl::StatusCode::kOk) {  // OnCancel saw no handle yet
    (*handle)->Cancel(cancelled_meanwhile);
    scheduler_->Notify();
  }
}

void GenerateUnaryReactor::OnUpdate(GenerationUpdate u) {
  absl::ReleasableMutexLock lock(&mu_);
  if (done_) return;
  if (u.status.ok()) AppendUpdate(u, &message_);
  if (!u.finished) return;
  SummarizeFinalUpdate(u, &summary_);
  done_ = true;  // nothing touches response_ after Finish
  lock.Release();
  FinishWith(FinalStatus(u));
}

void GenerateUnaryReactor::OnCancel() {
  const absl::StatusCode why = CancelReason(started_, deadline_, absl::Now());
  std::shared_ptr<RequestHandle> handle;
  {
    absl::MutexLock lock(&mu_);
    handle = handle_;
    cancelled_ = why;
  }
  if (handle != nullptr) {
    handle->Cancel(why);
    scheduler_->Notify();
  }
}

void GenerateUnaryReactor::OnDone() {
  std::shared_ptr<GenerateUnaryReactor> keep = std::move(self_);
  absl::MutexLock lock(&mu_);
  done_ = true;
}

}  // namespace expertd::server
