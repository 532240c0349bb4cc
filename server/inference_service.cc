#include "server/inference_service.h"

#include <atomic>
#include <functional>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/generate_reactors.h"
#include "server/grpc_status.h"
#include "server/model_info.h"
#include "server/model_runtime.h"
#include "server/proto_time.h"
#include "server/reactors.h"
#include "server/request_decoding.h"
#include "server/tokenize_pool.h"
#include "server/version.h"

namespace expertd::server {
namespace {

std::string NextRequestId() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat("req-", counter.fetch_add(1) + 1);
}

uint64_t RandomSeed() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::Uniform<uint64_t>(*gen);
}

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  auto d = ctx->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

// A decoded call for the served model, not validated yet.
struct Decoded {
  std::shared_ptr<const LoadedModel> model;
  v1::GenerateRequest request;
  absl::Time deadline;
};

// Starts a call's summary: ids (the server's also goes to the client as
// response metadata), arrival.
RequestSummary StartSummary(ServingState* state, grpc::CallbackServerContext* ctx,
                            const char* rpc) {
  RequestSummary s;
  s.rpc = rpc;
  s.request_id = NextRequestId();
  s.arrival = state->clock()->Now();
  ctx->AddInitialMetadata(kRequestIdMetadata, s.request_id);
  return s;
}

absl::StatusOr<Decoded> Decode(ServingState* state, grpc::CallbackServerContext* ctx,
                               const grpc::ByteBuffer& raw, RequestSummary* summary) {
  Decoded d;
  grpc::Slice bytes;
  if (!raw.DumpToSingleSlice(&bytes).ok()) return absl::InvalidArgumentError("unreadable request");
  RETURN_IF_ERROR(DecodeMessage(
      absl::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()), &d.request));
  summary->client_request_id =
      d.request.request_id().size() <= 128 ? d.request.request_id() : "";
  RETURN_IF_ERROR(state->CheckAcceptingRequests());
  d.model = state->model();
  d.deadline = DeadlineOf(ctx);
  return d;
}

// Field checks and tokenization: the part that may take long.
absl::StatusOr<GenerationRequest> Validate(const Decoded& d, const RequestSummary& summary) {
  ModelRuntime* rt = d.model->runtime.get();
  ASSIGN_OR_RETURN(GenerationRequest r,
                   ValidateGenerateRequest(d.request, rt->limits(), rt->text_tokenizer(),
                                           RandomSeed(), summary.request_id));
  r.arrival = summary.arrival;  // read from the daemon's clock
  r.deadline = d.deadline;
  return r;
}

// A text prompt long enough to tokenize off the serving thread. Prompts over
// the model's bytes bound are not: validation refuses them by size at once.
bool TokenizeOffThread(const Decoded& d) {
  if (d.request.prompt_case() != v1::GenerateRequest::kText) return false;
  const size_t bytes = d.request.text().size();
  const size_t bound = d.model->runtime->limits().max_prompt_bytes;
  return bytes > kInlineTokenizeBytes && (bound == 0 || bytes <= bound);
}

// Validates on the pool (or inline when it refuses the job: then the call
// ends with its RESOURCE_EXHAUSTED) and hands the result to the reactor.
template <typename Reactor>
void StartOffThread(TokenizePool* pool, Decoded d, const RequestSummary& summary,
                    Reactor* reactor) {
  absl::Status queued = pool->Submit([d = std::move(d), summary, reactor]() mutable {
    reactor->Start(Validate(d, summary));
  });
  if (!queued.ok()) reactor->Start(queued);
}

using Record = std::function<void(const grpc::Status&, const RequestSummary&)>;

// gRPC runs the handler with no message when the stream ends before the
// request arrives: the client half-closed without one (a protocol error) or,
// far more often, died or cancelled right after sending its headers. The call
// is refused, and recorded only once it is over, when its fate is known: a
// client that went away is counted as CANCELLED, not as an error it never saw.
grpc::Status NoMessageStatus() {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "request: the call ended before its GenerateRequest message arrived "
                      "(send exactly one)");
}

grpc::Status RecordedStatus(grpc::CallbackServerContext* ctx, const grpc::Status& sent) {
  if (ctx->IsCancelled()) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client went away before its request arrived");
  }
  return sent;
}

class NoMessageStreamReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  NoMessageStreamReactor(grpc::CallbackServerContext* ctx, RequestSummary summary, Record record)
      : ctx_(ctx), summary_(std::move(summary)), record_(std::move(record)) {
    Finish(NoMessageStatus());
  }
  void OnDone() override {
    record_(RecordedStatus(ctx_, NoMessageStatus()), summary_);
    delete this;
  }

 private:
  grpc::CallbackServerContext* const ctx_;
  const RequestSummary summary_;
  const Record record_;
};

class NoMessageUnaryReactor : public grpc::ServerUnaryReactor {
 public:
  NoMessageUnaryReactor(grpc::CallbackServerContext* ctx, RequestSummary summary, Record record)
      : ctx_(ctx), summary_(std::move(summary)), record_(std::move(record)) {
    Finish(NoMessageStatus());
  }
  void OnDone() override {
    record_(RecordedStatus(ctx_, NoMessageStatus()), summary_);
    delete this;
  }

 private:
  grpc::CallbackServerContext* const ctx_;
  const RequestSummary summary_;
  const Record record_;
};

}  // namespace

std::function<void(const grpc::Status&, const RequestSummary&)> InferenceServiceImpl::Recorder() {
  ServingMetrics* m = metrics_;
  const bool log = state_->options().log_requests;
  return [m, log](const grpc::Status& s, const RequestSummary& summary) {
    const auto code = static_cast<absl::StatusCode>(s.error_code());
    if (m != nullptr) m->OnRpcFinished(summary.rpc, code);
    if (log) LogRequest(summary, absl::Status(code, s.error_message()));
  };
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Done(grpc::CallbackServerContext* ctx,
                                                     const char* rpc, grpc::Status status) {
  if (metrics_ != nullptr)
    metrics_->OnRpcFinished(rpc, static_cast<absl::StatusCode>(status.error_code()));
  return FinishUnary(ctx, std::move(status));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* InferenceServiceImpl::Generate(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  RequestSummary summary = StartSummary(state_, ctx, "Generate");
  if (!request->Valid()) return new NoMessageStreamReactor(ctx, std::move(summary), Recorder());
  absl::StatusOr<Decoded> d = Decode(state_, ctx, *request, &summary);
  if (!d.ok()) {
    grpc::Status status = ToGrpcStatus(d.status());
    Recorder()(status, summary);
    return new FinishedWriteReactor<grpc::ByteBuffer>(status);
  }
  Scheduler* scheduler = d->model->runtime->scheduler();
  auto* reactor =
      GenerateStreamReactor::New(d->model, scheduler, d->deadline, summary, Recorder());
  if (tokenize_pool_ != nullptr && TokenizeOffThread(*d)) {
    StartOffThread(tokenize_pool_, *std::move(d), summary, reactor);
  } else {
    reactor->Start(Validate(*d, summary));
  }
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::GenerateUnary(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  RequestSummary summary = StartSummary(state_, ctx, "GenerateUnary");
  if (!request->Valid()) return new NoMessageUnaryReactor(ctx, std::move(summary), Recorder());
  absl::StatusOr<Decoded> d = Decode(state_, ctx, *request, &summary);
  if (!d.ok()) {
    grpc::Status status = ToGrpcStatus(d.status());
    Recorder()(status, summary);
    return FinishUnary(ctx, std::move(status));
  }
  Scheduler* scheduler = d->model->runtime->scheduler();
  auto* reactor =
      GenerateUnaryReactor::New(d->model, scheduler, d->deadline, summary, response, Recorder());
  if (tokenize_pool_ != nullptr && TokenizeOffThread(*d)) {
    StartOffThread(tokenize_pool_, *std::move(d), summary, reactor);
  } else {
    reactor->Start(Validate(*d, summary));
  }
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Tokenize(grpc::CallbackServerContext* ctx,
                                                         const v1::TokenizeRequest* request,
                                                         v1::TokenizeResponse* response) {
  std::shared_ptr<const LoadedModel> model = state_->model();
  if (model == nullptr)
    return Done(ctx, "Tokenize", ToGrpcStatus(state_->CheckAcceptingRequests()));
  const models::Tokenizer* tok = model->runtime->tokenizer();
  if (tok == nullptr) {
    return Done(ctx, "Tokenize",
                grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             "Tokenize: the model directory has no tokenizer.json"));
  }
  // Refused by size before tokenizing, with Generate's bound: no longer text
  // fits the model's context, so encoding it would only cost memory and time.
  const ValidationLimits& limits = model->runtime->limits();
  if (limits.max_prompt_bytes > 0 && request->text().size() > limits.max_prompt_bytes) {
    return Done(ctx, "Tokenize",
                grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             absl::StrCat("text: the text is ", request->text().size(),
                                          " bytes; the model's context of ", limits.max_context,
                                          " tokens holds at most ", limits.max_prompt_bytes,
                                          " bytes of text")));
  }
  auto encode = [model, tok, request, response]() -> grpc::Status {
    auto ids = tok->Encode(request->text(), request->has_add_special_tokens()
                                                ? request->add_special_tokens()
                                                : true);
    if (!ids.ok()) return ToGrpcStatus(ids.status());
    for (int32_t id : *ids) response->add_token_ids(static_cast<uint32_t>(id));
    return grpc::Status::OK;
  };
  if (tokenize_pool_ == nullptr || request->text().size() <= kInlineTokenizeBytes)
    return Done(ctx, "Tokenize", encode());
  // Long text: encoded on the pool; the call ends from there.
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto finish = [this, reactor](grpc::Status status) {
    if (metrics_ != nullptr)
      metrics_->OnRpcFinished("Tokenize", static_cast<absl::StatusCode>(status.error_code()));
    reactor->Finish(std::move(status));
  };
  absl::Status queued = tokenize_pool_->Submit([encode, finish] { finish(encode()); });
  if (!queued.ok()) finish(ToGrpcStatus(queued));
  return reactor;
}

grpc::ServerUnaryReactor* InferenceServiceImpl::Detokenize(grpc::CallbackServerContext* ctx,
                                                           const v1::DetokenizeRequest* request,
                                                           v1::DetokenizeResponse* response) {
  std::shared_ptr<const LoadedModel> model = state_->model();
  if (model == nullptr)
    return Done(ctx, "Detokenize", ToGrpcStatus(state_->CheckAcceptingRequests()));
  const models::Tokenizer* tok = model->runtime->tokenizer();
  if (tok == nullptr) {
    return Done(ctx, "Detokenize",
                grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             "Detokenize: the model directory has no tokenizer.json"));
  }
  std::vector<int32_t> ids;
  ids.reserve(request->token_ids_size());
  for (uint32_t id : request->token_ids()) {
    if (id > static_cast<uint32_t>(INT32_MAX) || !tok->IsValidId(static_cast<int32_t>(id))) {
      return Done(
          ctx, "Detokenize",
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("token_ids: ", id, " is not in the tokenizer's vocabulary")));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  auto text =
      tok->Decode(ids, request->has_skip_special_tokens() ? request->skip_special_tokens() : true);
  if (!text.ok()) return Done(ctx, "Detokenize", ToGrpcStatus(text.status()));
  response->set_text(*std::move(text));
  return Done(ctx, "Detokenize", grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::GetModelInfo(grpc::CallbackServerContext* ctx,
                                                             const v1::GetModelInfoRequest* request,
                                                             v1::ModelInfo* response) {
  std::shared_ptr<const LoadedModel> model = state_->model();
  if (model == nullptr) {
    return Done(
        ctx, "GetModelInfo",
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "model is still loading; retry shortly"));
  }
  FillModelInfo(*model, state_->options(), response);
  return Done(ctx, "GetModelInfo", grpc::Status::OK);
}

grpc::ServerUnaryReactor* InferenceServiceImpl::GetServerInfo(
    grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest* request,
    v1::ServerInfo* response) {
  response->set_version(kVersion);
  ToProtoDuration(state_->clock()->Now() - state_->start_time(), response->mutable_uptime());
  response->set_ready(state_->ready());
  response->set_draining(state_->draining());
  response->set_max_batch_tokens(state_->options().max_batch_tokens);
  response->set_max_queue_length(state_->options().max_queue_length);
  // Requests still finishing on a replaced model count too; the KV cache is
  // the served model's (live_models() lists it first).
  int64_t running = 0, waiting = 0;
  bool first = true;
  for (const std::shared_ptr<const LoadedModel>& model : state_->live_models()) {
    if (model->runtime == nullptr) continue;
    SchedulerStats stats = model->runtime->scheduler()->stats();
    running += stats.running;
    waiting += stats.waiting;
    if (first) response->set_kv_cache_usage(stats.kv_cache_usage);
    first = false;
  }
  response->set_running_requests(static_cast<uint32_t>(running));
  response->set_waiting_requests(static_cast<uint32_t>(waiting));
  return Done(ctx, "GetServerInfo", grpc::Status::OK);
}

}  // namespace expertd::server
