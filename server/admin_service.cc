#include "server/admin_service.h"

#include "server/admin_auth.h"
#include "server/grpc_status.h"
#include "server/reactors.h"

namespace expertd::server {
namespace {

constexpr char kNoTrainer[] = "not available in this build: the fine-tuning engine is not built yet";
constexpr char kNoExpertStore[] =
    "not available in this build: the expert store (offloading, cache statistics) is not built yet";

grpc::Status Unimplemented(const char* rpc, const char* why) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, std::string(rpc) + ": " + why);
}

}  // namespace

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

grpc::ServerUnaryReactor* AdminServiceImpl::SubmitFineTune(grpc::CallbackServerContext* ctx,
                                                           const v1::SubmitFineTuneRequest*, v1::FineTuneJob*) {
  grpc::Status auth = Authenticate(ctx);
  return FinishUnary(ctx, auth.ok() ? Unimplemented("SubmitFineTune", kNoTrainer) : auth);
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetFineTuneJob(grpc::CallbackServerContext* ctx,
                                                           const v1::GetFineTuneJobRequest*, v1::FineTuneJob*) {
  grpc::Status auth = Authenticate(ctx);
  return FinishUnary(ctx, auth.ok() ? Unimplemented("GetFineTuneJob", kNoTrainer) : auth);
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListFineTuneJobs(grpc::CallbackServerContext* ctx,
                                                             const v1::ListFineTuneJobsRequest*,
                                                             v1::ListFineTuneJobsResponse*) {
  grpc::Status auth = Authenticate(ctx);
  return FinishUnary(ctx, auth.ok() ? Unimplemented("ListFineTuneJobs", kNoTrainer) : auth);
}

grpc::ServerUnaryReactor* AdminServiceImpl::CancelFineTuneJob(grpc::CallbackServerContext* ctx,
                                                              const v1::CancelFineTuneJobRequest*, v1::FineTuneJob*) {
  grpc::Status auth = Authenticate(ctx);
  return FinishUnary(ctx, auth.ok() ? Unimplemented("CancelFineTuneJob", kNoTrainer) : auth);
}

grpc::ServerWriteReactor<v1::FineTuneJobEvent>* AdminServiceImpl::WatchFineTuneJob(
    grpc::CallbackServerContext* ctx, const v1::WatchFineTuneJobRequest*) {
  grpc::Status auth = Authenticate(ctx);
  return new FinishedWriteReactor<v1::FineTuneJobEvent>(auth.ok() ? Unimplemented("WatchFineTuneJob", kNoTrainer)
                                                                   : auth);
}

grpc::ServerUnaryReactor* AdminServiceImpl::ActivateCheckpoint(grpc::CallbackServerContext* ctx,
                                                               const v1::ActivateCheckpointRequest*,
                                                               v1::ActivateCheckpointResponse*) {
  grpc::Status auth = Authenticate(ctx);
  return FinishUnary(ctx, auth.ok() ? Unimplemented("ActivateCheckpoint", kNoTrainer) : auth);
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetExpertStats(grpc::CallbackServerContext* ctx,
                                                           const v1::GetExpertStatsRequest*, v1::ExpertStats*) {
  grpc::Status auth = Authenticate(ctx);
  return FinishUnary(ctx, auth.ok() ? Unimplemented("GetExpertStats", kNoExpertStore) : auth);
}

}  // namespace expertd::server
