// Session: one OpenAI request's choices running on the scheduler. Prepares
// (chat template, tokenization, the gRPC validation), submits every choice,
// and hands the scheduler's updates to the HTTP thread in order. Cancel()
// cancels every choice (client gone).
#ifndef EXPERTD_SERVER_OPENAI_SESSION_H_
#define EXPERTD_SERVER_OPENAI_SESSION_H_

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/generation_update.h"
#include "server/model_runtime.h"
#include "server/openai/api_request.h"
#include "server/scheduler.h"
#include "server/tokenize_pool.h"

namespace expertd::server::openai {

// An error with the HTTP status and OpenAI error fields it is sent with.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;
  std::string code;
  int retry_after_seconds = 0;  // > 0: a Retry-After header
};

struct ChoiceUpdate {
  int choice = 0;
  GenerationUpdate update;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // Renders/tokenizes/validates the request and submits all its choices
  // (prompts x n, choice = prompt * n + i). `id` names the scheduler requests.
  // On failure `error` says how to answer. `runtime` must outlive the session.
  // Chat templates render, and long prompts are tokenized, on
  // `tokenize_pool` (null: inline); a full pool answers 429.
  static absl::StatusOr<std::shared_ptr<Session>> Start(const ApiRequest& request,
                                                        ModelRuntime* runtime,
                                                        int64_t kv_block_size,
                                                        const std::string& id,
                                                        TokenizePool* tokenize_pool,
                                                        ApiError* error);
  ~Session();  // cancels choices still running

  int choices() const { return static_cast<int>(prompt_tokens_.size()); }
  int32_t prompt_tokens(int choice) const { return prompt_tokens_[choice]; }
  // Text prompt of each choice, for echo (decoded when given as token ids).
  const std::string& prompt_text(int choice) const { return prompt_texts_[choice / n_]; }
  int n() const { return n_; }

  // Updates since the last call, waiting up to `timeout` for one.
  std::vector<ChoiceUpdate> Take(absl::Duration timeout);
  bool finished() const;
  void Cancel();

  // Called by the observers on the scheduler thread.
  void Push(int choice, GenerationUpdate update);

 private:
  Session() = default;

  Scheduler* scheduler_ = nullptr;
  int n_ = 1;
  std::vector<int32_t> prompt_tokens_;     // per choice
  std::vector<std::string> prompt_texts_;  // per prompt
  std::vector<std::shared_ptr<RequestHandle>> handles_;

  mutable absl::Mutex mu_;
  std::deque<ChoiceUpdate> queue_ ABSL_GUARDED_BY(mu_);
  int unfinished_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace expertd::server::openai

#endif  // EXPERTD_SERVER_OPENAI_SESSION_H_
