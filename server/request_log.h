// One structured log line per Generate / GenerateUnary call and per OpenAI
// HTTP completion, at its end (--log_requests): msg "request", with the server's request id (also sent
// to the client as the "x-request-id" response metadata), the client's own
// request_id, token counts, time to first token, total time, finish reason
// and the gRPC status code (and message when not OK).
#ifndef EXPERTD_SERVER_REQUEST_LOG_H_
#define EXPERTD_SERVER_REQUEST_LOG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/generation_update.h"

namespace expertd::server {

// The metadata key carrying the server's request id.
inline constexpr char kRequestIdMetadata[] = "x-request-id";

struct RequestSummary {
  std::string rpc;                // "Generate", "GenerateUnary", "OpenAI.Completions", ...
  std::string request_id;         // the server's id ("req-<n>")
  std::string client_request_id;  // GenerateRequest.request_id as sent; may be empty
  absl::Time arrival = absl::InfinitePast();
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  bool has_first_token = false;
  absl::Duration time_to_first_token;
  FinishReason finish_reason = FinishReason::kNone;
};

// Copies the counts and times of a request's final update.
void SummarizeFinalUpdate(const GenerationUpdate& u, RequestSummary* s);

// "length", "stop", "eos", "cancelled", "error", or "" (none).
const char* FinishReasonName(FinishReason r);

// Writes the "request" line for a call that ended with `status` now.
void LogRequest(const RequestSummary& s, const absl::Status& status);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_REQUEST_LOG_H_
