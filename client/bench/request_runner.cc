#include "client/bench/request_runner.h"

#include <atomic>

#include "absl/status/status.h"

namespace expertd::bench {

v1::GenerateRequest BuildGenerateRequest(const PlannedRequest& planned,
                                         const RequestOptions& options) {
  v1::GenerateRequest r;
  r.set_request_id("bench-" + std::to_string(planned.index));
  if (!planned.prompt.token_ids.empty()) {
    r.mutable_token_ids()->mutable_ids()->Add(planned.prompt.token_ids.begin(),
                                              planned.prompt.token_ids.end());
  } else {
    r.set_text(planned.prompt.text);
  }
  r.set_model(options.model);
  r.mutable_stopping()->set_max_new_tokens(static_cast<uint32_t>(planned.max_new_tokens));
  r.mutable_stopping()->set_ignore_eos(options.ignore_eos);
  auto* s = r.mutable_sampling();
  s->set_temperature(static_cast<float>(options.temperature));
  if (options.top_p < 1) s->set_top_p(static_cast<float>(options.top_p));
  if (options.top_k > 0) s->set_top_k(static_cast<uint32_t>(options.top_k));
  s->set_seed(planned.sampling_seed);
  return r;
}

namespace {

double Seconds(const google::protobuf::Duration& d) {
  return static_cast<double>(d.seconds()) + d.nanos() * 1e-9;
}

std::string ReasonName(v1::FinishReason r) {
  const std::string& name = v1::FinishReason_Name(r);
  constexpr size_t kPrefix = sizeof("FINISH_REASON_") - 1;
  return name.size() > kPrefix ? name.substr(kPrefix) : name;
}

}  // namespace

// One Generate stream. Owned by a shared_ptr held by itself (self_, dropped in
// OnDone, the last reaction) and by the runner's in-flight map.
class GenerateCall : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  GenerateCall(RequestRunner* runner, const v1::GenerateRequest& request, RequestRecord record,
               RequestRunner::DoneFn done)
      : runner_(runner), request_(request), record_(std::move(record)), done_(std::move(done)) {}

  void Start(v1::InferenceService::Stub* stub, std::shared_ptr<GenerateCall> self,
             double timeout_s) {
    self_ = std::move(self);
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
    stub->async()->Generate(&ctx_, &request_, this);
    StartRead(&message_);
    record_.start_s = runner_->Now();
    StartCall();
  }

  void Cancel() {
    cancelled_.store(true);
    ctx_.TryCancel();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    const double now = runner_->Now();
    const int n = message_.token_ids_size();
    if (n > 0) {
      record_.message_times_s.push_back(now);
      record_.message_tokens.push_back(n);
      record_.output_tokens += n;
    }
    if (message_.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      record_.finish_reason = ReasonName(message_.finish_reason());
      record_.error_message = message_.error_message();
      if (message_.has_usage()) {
        record_.server_output_tokens = message_.usage().completion_tokens();
        record_.input_tokens = message_.usage().prompt_tokens();
      }
      if (message_.has_timing()) {
        record_.server_queue_s = Seconds(message_.timing().queue_time());
        record_.server_ttft_s = Seconds(message_.timing().time_to_first_token());
      }
      final_reason_ = message_.finish_reason();
    }
    StartRead(&message_);
  }

  void OnDone(const grpc::Status& status) override {
    record_.end_s = runner_->Now();
    record_.outcome = Outcome(status);
    if (!status.ok()) record_.error_message = status.error_message();
    std::shared_ptr<GenerateCall> keep = std::move(self_);  // `this` lives until the end of OnDone
    runner_->Finished(this);
    done_(std::move(record_));
  }

 private:
  std::string Outcome(const grpc::Status& status) const {
    if (status.ok()) {
      switch (final_reason_) {
        case v1::FINISH_REASON_ERROR:
          return "ENGINE_ERROR";
        case v1::FINISH_REASON_CANCELLED:
          return "SERVER_CANCELLED";
        case v1::FINISH_REASON_UNSPECIFIED:
          return "NO_FINAL_MESSAGE";
        default:
          return kOutcomeOk;
      }
    }
    if (status.error_code() == grpc::StatusCode::CANCELLED && cancelled_.load())
      return kOutcomeCancelled;
    return absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  }

  RequestRunner* const runner_;
  const v1::GenerateRequest request_;
  RequestRecord record_;
  RequestRunner::DoneFn done_;
  grpc::ClientContext ctx_;
  v1::GenerateResponse message_;
  v1::FinishReason final_reason_ = v1::FINISH_REASON_UNSPECIFIED;
  std::atomic<bool> cancelled_{false};
  std::shared_ptr<GenerateCall> self_;
};

RequestRunner::RequestRunner(std::vector<std::shared_ptr<grpc::Channel>> channels,
                             Clock::time_point t0, double timeout_s)
    : GenerateRunner(t0), timeout_s_(timeout_s) {
  for (auto& c : channels) stubs_.push_back(v1::InferenceService::NewStub(c));
}

RequestRunner::~RequestRunner() = default;

void RequestRunner::Start(const v1::GenerateRequest& request, RequestRecord record, DoneFn done) {
  auto call = std::make_shared<GenerateCall>(this, request, std::move(record), std::move(done));
  v1::InferenceService::Stub* stub;
  {
    absl::MutexLock lock(&mu_);
    in_flight_[call.get()] = call;
    stub = stubs_[next_stub_++ % stubs_.size()].get();
  }
  GenerateCall* raw = call.get();
  raw->Start(stub, std::move(call), timeout_s_);
}

void RequestRunner::CancelAll() {
  std::vector<std::shared_ptr<GenerateCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [raw, call] : in_flight_) calls.push_back(call);
  }
  // Outside the lock: a cancel may finish a call inline, which takes mu_.
  for (auto& call : calls) call->Cancel();
}

void RequestRunner::Finished(GenerateCall* call) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(call);
}

size_t RequestRunner::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_.size();
}

std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const std::string& address, int n) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < n; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  return channels;
}

}  // namespace expertd::bench
