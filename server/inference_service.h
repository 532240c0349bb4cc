// InferenceService: the public generation API (proto/expertd.proto). Holds no
// math: it validates, converts protobuf <-> engine types and streams.
#ifndef EXPERTD_SERVER_INFERENCE_SERVICE_H_
#define EXPERTD_SERVER_INFERENCE_SERVICE_H_

#include <functional>

#include "proto/expertd.grpc.pb.h"
#include "server/metrics/serving_metrics.h"
#include "server/request_log.h"
#include "server/serving_state.h"
#include "server/tokenize_pool.h"

namespace expertd::server {

// Generate and GenerateUnary take the request as raw bytes and decode it
// themselves (server/request_decoding.h), so a request protobuf would refuse
// (invalid UTF-8 in a string) gets INVALID_ARGUMENT naming the field and
// byte offset, is counted, and is logged as JSON. Their responses are the
// same GenerateResponse / GenerateUnaryResponse messages, serialized.
using InferenceServiceBase = v1::InferenceService::WithRawCallbackMethod_Generate<
    v1::InferenceService::WithRawCallbackMethod_GenerateUnary<
        v1::InferenceService::CallbackService>>;

class InferenceServiceImpl final : public InferenceServiceBase {
 public:
  // `metrics` may be null (tests). `tokenize_pool` (may be null: everything
  // inline) tokenizes long text prompts off gRPC's threads; it must outlive
  // the server's calls.
  InferenceServiceImpl(ServingState* state, ServingMetrics* metrics,
                       TokenizePool* tokenize_pool = nullptr)
      : state_(state), metrics_(metrics), tokenize_pool_(tokenize_pool) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* GenerateUnary(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* ctx,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;

 private:
  // Finishes a unary call and counts it.
  grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const char* rpc,
                                 grpc::Status status);
  // Counts the call and writes its request log line (--log_requests).
  std::function<void(const grpc::Status&, const RequestSummary&)> Recorder();

  ServingState* const state_;      // not owned; outlives the service
  ServingMetrics* const metrics_;      // not owned; may be null
  TokenizePool* const tokenize_pool_;  // not owned; may be null
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_INFERENCE_SERVICE_H_
