// RequestRecord: what expert-bench measured for one Generate call. All times
// are seconds on the monotonic clock (std::chrono::steady_clock), relative to
// the start of the run (t0), taken the moment each event reached the client.
#ifndef EXPERTD_CLIENT_BENCH_REQUEST_RECORD_H_
#define EXPERTD_CLIENT_BENCH_REQUEST_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

namespace expertd::bench {

// Outcome names: "ok" (the stream ended with OK and finish_reason LENGTH,
// STOP or EOS); "cancelled" (we cancelled it: Ctrl-C); "ENGINE_ERROR" /
// "SERVER_CANCELLED" (OK status but finish_reason ERROR / CANCELLED);
// otherwise the gRPC status code name ("RESOURCE_EXHAUSTED",
// "DEADLINE_EXCEEDED", "UNAVAILABLE", ...).
inline constexpr char kOutcomeOk[] = "ok";
inline constexpr char kOutcomeCancelled[] = "cancelled";

struct RequestRecord {
  int64_t index = 0;
  bool warmup = false;      // issued during the warm-up phase: not in the results
  double scheduled_s = -1;  // open loop: planned arrival; closed loop: -1
  double start_s = 0;       // just before the call was started
  double end_s = 0;         // the call's final status arrived
  // One entry per streamed message that carried tokens: when it arrived and
  // how many tokens it carried.
  std::vector<double> message_times_s;
  std::vector<int32_t> message_tokens;

  int64_t input_tokens = -1;          // the server's usage.prompt_tokens, else the planned count
  int64_t output_tokens = 0;          // tokens received (sum of message_tokens)
  int64_t server_output_tokens = -1;  // usage.completion_tokens of the final message (-1: none)
  int64_t max_new_tokens = 0;
  uint64_t prompt_hash = 0;

  std::string outcome;
  std::string finish_reason;   // "LENGTH", "STOP", "EOS", ... ("" without a final message)
  std::string error_message;   // the gRPC status or engine error message
  double server_queue_s = -1;  // the final message's timing (-1: none)
  double server_ttft_s = -1;

  bool ok() const { return outcome == kOutcomeOk; }
  bool has_first_token() const { return !message_times_s.empty(); }
  // REQUIRES: has_first_token().
  double ttft_s() const { return message_times_s.front() - start_s; }
  double e2e_s() const { return end_s - start_s; }
  // (e2e - ttft) / (output_tokens - 1), as vLLM; -1 with fewer than 2 tokens.
  double tpot_s() const {
    if (output_tokens < 2 || !has_first_token()) return -1;
    return (e2e_s() - ttft_s()) / static_cast<double>(output_tokens - 1);
  }
};

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_REQUEST_RECORD_H_
