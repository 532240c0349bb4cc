#include "server/admin_service.h"

#include "server/admin_auth.h"
#include "server/expert_stats.h"
#include "server/grpc_status.h"
#include "server/job_reactors.h"
#include "server/model_runtime.h"
#include "server/reactors.h"

namespace expertd::server {
grpc::Status AdminServiceImpl::Authenticate(grpc::CallbackServerContext* ctx) const {
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  absl::string_view header;
  const absl::string_view* header_ptr = nullptr;
  if (it != metadata.end()) {
    header = absl::string_view(it->second.data(), it->second.size());
    header_ptr = &header;
  }
  return ToGrpcStatus(CheckAdminToken(state_->options().admin_token, header_ptr));
}

void AdminServiceImpl::SetJobSystem(jobs::JobSystem* jobs, absl::Status unavailable) {
  jobs_ = jobs;
  if (jobs == nullptr) jobs_unavailable_ = std::move(unavailable);
}

grpc::Status AdminServiceImpl::CheckJobs(grpc::CallbackServerContext* ctx) const {
  grpc::Status auth = Authenticate(ctx);
  if (!auth.ok()) return auth;
  if (jobs_ == nullptr) return ToGrpcStatus(jobs_unavailable_);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* AdminServiceImpl::SubmitFineTune(grpc::CallbackServerContext* ctx,
                                                           const v1::SubmitFineTuneRequest* request,
                                                           v1::FineTuneJob* response) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return FinishUnary(ctx, ok);
  absl::StatusOr<v1::FineTuneJob> job = jobs_->manager()->Submit(*request);
  if (job.ok()) *response = *std::move(job);
  return FinishUnary(ctx, ToGrpcStatus(job.status()));
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetFineTuneJob(grpc::CallbackServerContext* ctx,
                                                           const v1::GetFineTuneJobRequest* request,
                                                           v1::FineTuneJob* response) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return FinishUnary(ctx, ok);
  absl::StatusOr<v1::FineTuneJob> job = jobs_->manager()->Get(request->job_id());
  if (job.ok()) *response = *std::move(job);
  return FinishUnary(ctx, ToGrpcStatus(job.status()));
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListFineTuneJobs(
    grpc::CallbackServerContext* ctx, const v1::ListFineTuneJobsRequest* request,
    v1::ListFineTuneJobsResponse* response) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return FinishUnary(ctx, ok);
  absl::StatusOr<v1::ListFineTuneJobsResponse> page = jobs_->manager()->List(*request);
  if (page.ok()) *response = *std::move(page);
  return FinishUnary(ctx, ToGrpcStatus(page.status()));
}

grpc::ServerUnaryReactor* AdminServiceImpl::CancelFineTuneJob(
    grpc::CallbackServerContext* ctx, const v1::CancelFineTuneJobRequest* request,
    v1::FineTuneJob* response) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return FinishUnary(ctx, ok);
  absl::StatusOr<v1::FineTuneJob> job = jobs_->manager()->Cancel(request->job_id());
  if (job.ok()) *response = *std::move(job);
  return FinishUnary(ctx, ToGrpcStatus(job.status()));
}

grpc::ServerWriteReactor<v1::FineTuneJobEvent>* AdminServiceImpl::WatchFineTuneJob(
    grpc::CallbackServerContext* ctx, const v1::WatchFineTuneJobRequest* request) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return new FinishedWriteReactor<v1::FineTuneJobEvent>(ok);
  absl::StatusOr<v1::FineTuneJob> job = jobs_->manager()->Get(request->job_id());
  if (!job.ok()) return new FinishedWriteReactor<v1::FineTuneJobEvent>(ToGrpcStatus(job.status()));
  return WatchJobReactor::Start(jobs_->manager(), request->job_id(), request->after_sequence());
}

grpc::ServerReadReactor<v1::UploadFileRequest>* AdminServiceImpl::UploadFile(
    grpc::CallbackServerContext* ctx, v1::FileInfo* response) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return new FinishedReadReactor<v1::UploadFileRequest>(ok);
  return new UploadFileReactor(ctx, jobs_->files(), response);
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListFiles(grpc::CallbackServerContext* ctx,
                                                      const v1::ListFilesRequest*,
                                                      v1::ListFilesResponse* response) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return FinishUnary(ctx, ok);
  absl::StatusOr<std::vector<v1::FileInfo>> files = jobs_->files()->List();
  if (files.ok()) {
    for (v1::FileInfo& f : *files) *response->add_files() = std::move(f);
  }
  return FinishUnary(ctx, ToGrpcStatus(files.status()));
}

grpc::ServerUnaryReactor* AdminServiceImpl::DeleteFile(grpc::CallbackServerContext* ctx,
                                                       const v1::DeleteFileRequest* request,
                                                       v1::DeleteFileResponse* response) {
  grpc::Status ok = CheckJobs(ctx);
  if (!ok.ok()) return FinishUnary(ctx, ok);
  absl::StatusOr<v1::DeleteFileResponse> deleted = jobs_->manager()->DeleteFile(request->file_id());
  if (deleted.ok()) *response = *std::move(deleted);
  return FinishUnary(ctx, ToGrpcStatus(deleted.status()));
}

grpc::ServerUnaryReactor* AdminServiceImpl::ActivateCheckpoint(
    grpc::CallbackServerContext* ctx, const v1::ActivateCheckpointRequest* request,
    v1::ActivateCheckpointResponse* response) {
  grpc::Status auth = Authenticate(ctx);
  if (!auth.ok()) return FinishUnary(ctx, auth);
  if (activator_ == nullptr) {
    return FinishUnary(ctx, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                         "ActivateCheckpoint: not available in this server"));
  }
  // Loading takes seconds to minutes: the activator's thread finishes the call.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  activator_->ActivateAsync(
      request->job_id(), request->checkpoint_id(),
      [reactor, response](absl::StatusOr<ActivationResult> result) {
        if (!result.ok()) {
          reactor->Finish(ToGrpcStatus(result.status()));
          return;
        }
        response->set_model_name(result->model_name);
        response->set_checkpoint_id(result->checkpoint_id);
        const int64_t ns = absl::ToUnixNanos(result->activate_time);
        response->mutable_activate_time()->set_seconds(ns / 1000000000);
        response->mutable_activate_time()->set_nanos(static_cast<int32_t>(ns % 1000000000));
        reactor->Finish(grpc::Status::OK);
      });
  return reactor;
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetExpertStats(grpc::CallbackServerContext* ctx,
                                                           const v1::GetExpertStatsRequest* request,
                                                           v1::ExpertStats* response) {
  grpc::Status auth = Authenticate(ctx);
  if (!auth.ok()) return FinishUnary(ctx, auth);
  std::shared_ptr<const LoadedModel> model = state_->model();
  if (model == nullptr || model->runtime == nullptr) {
    return FinishUnary(
        ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "model is still loading; retry shortly"));
  }
  const engine::ExpertStore* store = model->runtime->expert_store();
  const int64_t tokens = model->runtime->scheduler()->stats().tokens_processed;
  if (const auto* devices = model->runtime->device_counters(); store == nullptr && devices) {
    // Several devices, one store each (its slice of every expert).
    for (const engine::ExpertStoreStats& s : devices->DeviceStoreStats()) {
      FillExpertStats(s, tokens, response->add_devices());
    }
    if (response->devices_size() > 0) {
      response->set_policy(response->devices(0).policy());
      response->set_prefetch(response->devices(0).prefetch());
    }
    response->set_tokens_processed(static_cast<uint64_t>(tokens));
    return FinishUnary(ctx, grpc::Status::OK);
  }
  if (store == nullptr) {
    return FinishUnary(
        ctx, grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "GetExpertStats: every expert is resident (the daemon runs without "
                          "--expert_offload), so there is no expert cache to report"));
  }
  FillExpertStats(store->stats(), tokens, response);
  // Layer residency is cheap to count; the per-expert list only on request.
  FillExpertPlacement(store->Placement(), response);
  if (!request->per_expert()) response->clear_experts();
  return FinishUnary(ctx, grpc::Status::OK);
}

}  // namespace expertd::server
