// InferenceService: the public generation API (proto/expertd.proto). Holds no
// math: it validates, converts protobuf <-> engine types and streams.
#ifndef EXPERTD_SERVER_INFERENCE_SERVICE_H_
#define EXPERTD_SERVER_INFERENCE_SERVICE_H_

#include <functional>

#include "proto/expertd.grpc.pb.h"
#include "server/metrics/serving_metrics.h"
#include "server/serving_state.h"

namespace expertd::server {

class InferenceServiceImpl final : public v1::InferenceService::CallbackService {
 public:
  // `metrics` may be null (tests).
  InferenceServiceImpl(ServingState* state, ServingMetrics* metrics) : state_(state), metrics_(metrics) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* ctx,
                                                            const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GenerateUnary(grpc::CallbackServerContext* ctx, const v1::GenerateRequest* request,
                                          v1::GenerateUnaryResponse* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx, const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx, const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx, const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;

 private:
  // Finishes a unary call and counts it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const char* rpc, grpc::Status status);
  std::function<void(const grpc::Status&)> Recorder(const char* rpc);

  ServingState* const state_;      // not owned; outlives the service
  ServingMetrics* const metrics_;  // not owned; may be null
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_INFERENCE_SERVICE_H_
