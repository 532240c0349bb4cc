// OpenAiRunner: drives expertd's OpenAI-compatible HTTP API (--http_listen)
// with the same planned requests as the gRPC runner, so one benchmark compares
// both APIs: `openai` posts /v1/completions, `openai-chat` posts
// /v1/chat/completions with the prompt as one user message; both stream (SSE)
// with stream_options.include_usage. Each streamed chunk that carries text is
// timestamped the moment it arrives and counts one token (the server sends one
// chunk per token); output_tokens is then the server's usage.completion_tokens.
//
// One thread per request in flight (cpp-httplib's client is blocking).
// Thread safety: every method may be called from any thread.
#ifndef EXPERTD_CLIENT_BENCH_OPENAI_RUNNER_H_
#define EXPERTD_CLIENT_BENCH_OPENAI_RUNNER_H_

#include <atomic>
#include <string>

#include "absl/synchronization/mutex.h"
#include "client/bench/request_runner.h"

namespace expertd::bench {

class OpenAiRunner final : public GenerateRunner {
 public:
  // `host`:`port` of --http_listen; `chat` selects /v1/chat/completions;
  // `model` is the served model name (required by the API).
  OpenAiRunner(std::string host, int port, bool chat, std::string model, std::string api_key,
               Clock::time_point t0, double timeout_s);
  ~OpenAiRunner() override;  // waits for the calls in flight

  void Start(const v1::GenerateRequest& request, RequestRecord record, DoneFn done) override;
  void CancelAll() override;
  size_t in_flight() const override;

 private:
  void Run(const v1::GenerateRequest& request, RequestRecord record, DoneFn done);

  const std::string host_;
  const int port_;
  const bool chat_;
  const std::string model_;
  const std::string api_key_;
  const double timeout_s_;
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_OPENAI_RUNNER_H_
