#include "server/request_log.h"

#include "absl/time/clock.h"
#include "base/log.h"

namespace expertd::server {

void SummarizeFinalUpdate(const GenerationUpdate& u, RequestSummary* s) {
  s->prompt_tokens = u.prompt_tokens;
  s->completion_tokens = u.completion_tokens;
  s->has_first_token = u.completion_tokens > 0;
  s->time_to_first_token = u.timing.time_to_first_token;
  s->finish_reason = u.finish_reason;
}

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

void LogRequest(const RequestSummary& s, const absl::Status& status) {
  const absl::Duration total =
      s.arrival == absl::InfinitePast() ? absl::ZeroDuration() : absl::Now() - s.arrival;
  auto line = EXPERTD_LOG(Info, "request");
  line.With("rpc", s.rpc)
      .With("request_id", s.request_id)
      .With("client_request_id", s.client_request_id)
      .With("prompt_tokens", s.prompt_tokens)
      .With("generated_tokens", s.completion_tokens)
      .With("ttft_seconds", s.has_first_token ? absl::ToDoubleSeconds(s.time_to_first_token) : 0.0)
      .With("total_seconds", absl::ToDoubleSeconds(total))
      .With("finish_reason", FinishReasonName(s.finish_reason))
      .With("code", absl::StatusCodeToString(status.code()));
  if (!status.ok()) line.With("error", std::string(status.message()));
}

}  // namespace expertd::server
