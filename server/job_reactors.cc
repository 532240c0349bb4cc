#include "server/job_reactors.h"

#include "server/grpc_status.h"
#include "server/jobs/job_state.h"

namespace expertd::server {
namespace {

constexpr int kReplayBatch = 64;

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

}  // namespace

UploadFileReactor::UploadFileReactor(grpc::CallbackServerContext* ctx, jobs::FileStore* files,
                                     v1::FileInfo* response)
    : ctx_(ctx), files_(files), response_(response) {
  StartRead(&request_);
}

void UploadFileReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client half-closed (or went away: then nothing is stored).
    if (ctx_->IsCancelled()) return Finish(grpc::Status::CANCELLED);
    if (upload_ == nullptr) {
      return Finish(
          InvalidArgument("UploadFile: no metadata message (the first message names "
                          "the file)"));
    }
    absl::StatusOr<v1::FileInfo> info = upload_->Finish();
    upload_.reset();
    if (!info.ok()) return Finish(ToGrpcStatus(info.status()));
    *response_ = *std::move(info);
    return Finish(grpc::Status::OK);
  }
  if (upload_ == nullptr) {
    if (!request_.has_metadata()) {
      return Finish(InvalidArgument("UploadFile: the first message must be metadata"));
    }
    absl::StatusOr<std::unique_ptr<jobs::FileUpload>> upload =
        files_->BeginUpload(request_.metadata());
    if (!upload.ok()) return Finish(ToGrpcStatus(upload.status()));
    upload_ = *std::move(upload);
  } else {
    if (request_.has_metadata()) {
      upload_.reset();
      return Finish(InvalidArgument("UploadFile: metadata only in the first message"));
    }
    absl::Status appended = upload_->Append(request_.chunk());
    if (!appended.ok()) {
      upload_.reset();
      return Finish(ToGrpcStatus(appended));
    }
  }
  StartRead(&request_);
}

WatchJobReactor* WatchJobReactor::Start(jobs::JobManager* manager, std::string job_id,
                                        uint64_t after_sequence) {
  auto reactor = std::make_shared<WatchJobReactor>(manager, std::move(job_id), after_sequence);
  reactor->keep_alive_ = reactor;
  manager->AddWatcher(reactor->job_id_, reactor);
  reactor->Pump();
  return reactor.get();
}

void WatchJobReactor::Pump() {
  std::shared_ptr<WatchJobReactor> self = shared_from_this();  // Finish may run OnDone inline
  grpc::Status end;
  bool finish = false;
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || finished_) return;
    if (pending_.empty() && !cancelled_) {
      // Status first: a terminal status read here means its final event is
      // already stored, so the query below sees it.
      absl::StatusOr<v1::FineTuneJob> job = manager_->Get(job_id_);
      absl::StatusOr<std::vector<v1::FineTuneJobEvent>> events =
          job.ok() ? manager_->Events(job_id_, next_after_, kReplayBatch) : job.status();
      if (!events.ok()) {
        end = ToGrpcStatus(events.status());
      } else if (!events->empty()) {
        pending_.assign(events->begin(), events->end());
        next_after_ = pending_.back().sequence();
      } else if (jobs::IsTerminal(job->status())) {
        end = grpc::Status::OK;
      } else if (manager_->shutting_down()) {
        end = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           "the daemon is shutting down; watch again after it restarts");
      } else {
        return;  // nothing new: wait for Wake
      }
    }
    if (cancelled_) end = grpc::Status::CANCELLED;
    if (!pending_.empty() && !cancelled_) {
      in_flight_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
    } else {
      finished_ = true;
      finish = true;
    }
  }
  // Outside the lock: gRPC may run OnWriteDone / OnDone inline.
  if (finish) {
    Finish(end);
  } else {
    StartWrite(&in_flight_);
  }
}

void WatchJobReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;  // the stream broke: end the call
  }
  Pump();
}

void WatchJobReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  Pump();
}

void WatchJobReactor::OnDone() {
  manager_->RemoveWatcher(job_id_, this);
  keep_alive_.reset();  // the last reference may be a Wake in progress
}

}  // namespace expertd::server
