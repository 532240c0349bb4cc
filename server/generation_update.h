// What the scheduler tells a request's owner (the RPC reactor) as generation
// proceeds. Engine-free and protobuf-free: the service converts it.
#ifndef EXPERTD_SERVER_GENERATION_UPDATE_H_
#define EXPERTD_SERVER_GENERATION_UPDATE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace expertd::server {

enum class FinishReason { kNone, kLength, kStop, kEos, kCancelled, kError };

struct TokenLogprobs {
  int32_t token_id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct GenerationTiming {
  absl::Duration queue_time;           // arrival -> first step that included it
  absl::Duration time_to_first_token;  // arrival -> first generated token
  absl::Duration decode_time;          // first -> last generated token
  absl::Duration total_time;           // arrival -> finish
};

struct GenerationUpdate {
  std::vector<int32_t> token_ids;       // new since the previous update
  std::string text;                     // UTF-8-complete delta
  std::vector<TokenLogprobs> logprobs;  // one per token when requested

  bool finished = false;  // last update of the request
  // When finished: OK with a finish reason, or the status the call ends with
  // (CANCELLED, DEADLINE_EXCEEDED).
  absl::Status status;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error_message;  // with kError
  std::string matched_stop_string;
  int32_t matched_stop_token_id = -1;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  GenerationTiming timing;
};

// Receives one request's updates, in order, on the scheduler thread. Must not
// block for long (it only queues for the network).
class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  virtual void OnUpdate(GenerationUpdate update) = 0;
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_GENERATION_UPDATE_H_
