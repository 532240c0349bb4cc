#include "server/inference_service.h"

#include "absl/time/clock.h"
#include "server/grpc_status.h"
#include "server/model_info.h"
#include "server/reactors.h"
#include "server/version.h"

namespace expertd::server {
namespace {

grpc::Status NotBuiltYet(const char* rpc, const char* missing) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      std::string(rpc) + ": not available in this build: " + missing);
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1000000000);
  out->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

}  // namespace

grpc::ServerWriteReactor<v1::GenerateResponse>* InferenceServiceImpl::Generate(grpc::CallbackServerContext* ctx,
                                                                               const v1::GenerateRequest* request) {
  absl::Status accepting = state_->CheckAcceptingRequests();
  if (!accepting.ok()) return new FinishedWriteReactor<v1::GenerateResponse>(ToGrpcStatus(accepting));
  return new FinishedWriteReactor<v1::GenerateResponse>(
      NotBuiltYet("Generate", "the MoE inference engine (CPU backend) is not built yet"));
}

grpc::ServerUnaryReactor* InferenceServiceImpl::GenerateUnary(grpc::CallbackServerContext* ctx,
                                                              const v1::GenerateRequest* request,
                                                              v1::GenerateUnaryResponse* response) {
  absl::Status accepting = state_->CheckAcceptingRequests();
  if (!accepting.ok()) return FinishUnary(ctx, ToGrpcStatus(accepting));
  return FinishUnary(ctx, NotBuiltYet("GenerateUnary", "the MoE inference engine (CPU backend) is not built yet"));
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Tokenize(grpc::CallbackServerContext* ctx,
                                                         const v1::TokenizeRequest* request,
                                                         v1::TokenizeResponse* response) {
  absl::Status accepting = state_->CheckAcceptingRequests();
  if (!accepting.ok()) return FinishUnary(ctx, ToGrpcStatus(accepting));
  return FinishUnary(ctx, NotBuiltYet("Tokenize", "the tokenizer.json reader is not built yet"));
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Detokenize(grpc::CallbackServerContext* ctx,
                                                           const v1::DetokenizeRequest* request,
                                                           v1::DetokenizeResponse* response) {
  absl::Status accepting = state_->CheckAcceptingRequests();
  if (!accepting.ok()) return FinishUnary(ctx, ToGrpcStatus(accepting));
  return FinishUnary(ctx, NotBuiltYet("Detokenize", "the tokenizer.json reader is not built yet"));
}

grpc::ServerUnaryReactor* InferenceServiceImpl::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                             const v1::GetModelInfoRequest* request,
                                                             v1::ModelInfo* response) {
  std::shared_ptr<const LoadedModel> model = state_->model();
  if (model == nullptr) {
    return FinishUnary(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "model is still loading; retry shortly"));
  }
  FillModelInfo(*model, state_->options(), response);
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                              const v1::GetServerInfoRequest* request,
                                                              v1::ServerInfo* response) {
  response->set_version(kVersion);
  SetDuration(absl::Now() - state_->start_time(), response->mutable_uptime());
  response->set_ready(state_->ready());
  response->set_draining(state_->draining());
  response->set_max_batch_tokens(state_->options().max_batch_tokens);
  response->set_max_queue_length(state_->options().max_queue_length);
  return FinishUnary(ctx, grpc::Status::OK);
}

}  // namespace expertd::server
