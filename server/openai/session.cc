#include "server/openai/session.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::server::openai {
namespace {

class ChoiceObserver final : public GenerationObserver {
 public:
  ChoiceObserver(std::weak_ptr<Session> session, int choice)
      : session_(std::move(session)), choice_(choice) {}
  void OnUpdate(GenerationUpdate update) override {
    if (std::shared_ptr<Session> s = session_.lock()) s->Push(choice_, std::move(update));
  }

 private:
  std::weak_ptr<Session> session_;
  const int choice_;
};

uint64_t RandomSeed() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::Uniform<uint64_t>(*gen);
}

ApiError BadRequest(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError RateLimited(const absl::Status& s) {
  ApiError e;
  e.http_status = 429;
  e.type = "rate_limit_exceeded";
  e.code = "rate_limit_exceeded";
  e.message = std::string(s.message());
  e.retry_after_seconds = 1;
  return e;
}

// The prompt as token ids: the rendered chat, a text prompt, or given ids.
// Refused by size before tokenizing; long ones tokenized on the pool.
absl::StatusOr<std::vector<uint32_t>> PromptIds(const ApiRequest& request,
                                                const PromptInput& prompt,
                                                const std::string& chat_text, ModelRuntime* runtime,
                                                TokenizePool* pool, ApiError* error) {
  if (prompt.is_tokens) return prompt.token_ids;
  const std::string& text =
      request.endpoint == Endpoint::kChatCompletions ? chat_text : prompt.text;
  const char* param = request.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  TextTokenizer tokenize = runtime->text_tokenizer();
  if (!tokenize) {
    *error = BadRequest("the model has no tokenizer.json: send the prompt as token ids", param);
    return absl::FailedPreconditionError(error->message);
  }
  const ValidationLimits& limits = runtime->limits();
  if (limits.max_prompt_bytes > 0 && text.size() > limits.max_prompt_bytes) {
    *error = BadRequest(absl::StrCat("the prompt is ", text.size(), " bytes; the model's context of ",
                                     limits.max_context, " tokens holds at most ",
                                     limits.max_prompt_bytes, " bytes of text"),
                        param);
    return absl::InvalidArgumentError(error->message);
  }
  const bool add_special = request.generate.add_special_tokens();
  absl::StatusOr<std::vector<int32_t>> ids = absl::InternalError("not tokenized");
  if (pool != nullptr && text.size() > kInlineTokenizeBytes) {
    absl::Status queued = pool->RunAndWait([&] { ids = tokenize(text, add_special); });
    if (!queued.ok()) {
      *error = RateLimited(queued);
      return queued;
    }
  } else {
    ids = tokenize(text, add_special);
  }
  if (!ids.ok()) {
    *error = BadRequest(std::string(ids.status().message()), param);
    return ids.status();
  }
  if (ids->empty()) {
    *error = BadRequest("the prompt is empty", param);
    return absl::InvalidArgumentError(error->message);
  }
  return std::vector<uint32_t>(ids->begin(), ids->end());
}

// OpenAI's default max_tokens: 16 for completions, the rest of the context for
// chat (bounded by what the KV cache can ever hold).
uint32_t DefaultMaxTokens(Endpoint endpoint, size_t prompt_tokens, ModelRuntime* runtime,
                          int64_t kv_block_size) {
  if (endpoint == Endpoint::kCompletions) return 16;
  const int64_t prompt = static_cast<int64_t>(prompt_tokens);
  int64_t room = runtime->limits().max_context - prompt;
  const SchedulerStats stats = runtime->scheduler()->stats();
  if (stats.kv_blocks_total > 0)
    room = std::min(room, stats.kv_blocks_total * kv_block_size - prompt);
  return static_cast<uint32_t>(std::max<int64_t>(1, room));
}

ApiError FromSubmitStatus(const absl::Status& s) {
  ApiError e;
  e.message = std::string(s.message());
  if (absl::IsResourceExhausted(s) && absl::StartsWith(s.message(), "the request needs")) {
    e.param = "max_tokens";  // can never fit: retrying will not help
  } else if (absl::IsResourceExhausted(s)) {
    e = RateLimited(s);
  } else if (absl::IsUnavailable(s)) {
    e.http_status = 503;
    e.type = "service_unavailable";
  } else {
    e.http_status = 500;
    e.type = "server_error";
  }
  return e;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Session>> Session::Start(const ApiRequest& request,
                                                        ModelRuntime* runtime,
                                                        int64_t kv_block_size,
                                                        const std::string& id,
                                                        TokenizePool* tokenize_pool,
                                                        ApiError* error) {
  std::string chat_text;
  std::vector<PromptInput> prompts = request.prompts;
  if (request.endpoint == Endpoint::kChatCompletions) {
    const chat_template::ChatFormatter& formatter = runtime->chat_formatter();
    if (!formatter.has_template()) {
      *error = BadRequest(
          "the model has no chat template (tokenizer_config.json chat_template); "
          "start expertd with --chat_template=FILE or use /v1/completions",
          "messages");
      return absl::FailedPreconditionError(error->message);
    }
    absl::StatusOr<std::string> rendered = absl::InternalError("not rendered");
    if (tokenize_pool != nullptr) {
      // A template is a program: its cost is not bounded by the size of the
      // messages, so every chat renders on the pool, bounded like long
      // prompts (a full pool answers 429), never on an HTTP worker.
      absl::Status queued =
          tokenize_pool->RunAndWait([&] { rendered = formatter.Render(request.chat); });
      if (!queued.ok()) {
        *error = RateLimited(queued);
        return queued;
      }
    } else {
      rendered = formatter.Render(request.chat);
    }
    if (!rendered.ok()) {
      *error = BadRequest(std::string(rendered.status().message()), "messages");
      return rendered.status();
    }
    chat_text = *std::move(rendered);
    prompts = {PromptInput{chat_text, {}, false}};
  }
  auto session = std::shared_ptr<Session>(new Session());
  session->scheduler_ = runtime->scheduler();
  session->n_ = request.n;
  std::vector<GenerationRequest> validated;
  for (const PromptInput& prompt : prompts) {
    ASSIGN_OR_RETURN(std::vector<uint32_t> ids,
                     PromptIds(request, prompt, chat_text, runtime, tokenize_pool, error));
    v1::GenerateRequest g = request.generate;
    g.clear_text();
    for (uint32_t tok : ids) g.mutable_token_ids()->add_ids(tok);
    if (!request.max_tokens_given) {
      g.mutable_stopping()->set_max_new_tokens(
          DefaultMaxTokens(request.endpoint, ids.size(), runtime, kv_block_size));
    }
    absl::StatusOr<GenerationRequest> r =
        ValidateGenerateRequest(g, runtime->limits(), nullptr, RandomSeed(), id);
    if (!r.ok()) {
      *error = BadRequest(std::string(r.status().message()),
                          OpenAiParamOf(request.endpoint, std::string(r.status().message())));
      return r.status();
    }
    if (prompt.is_tokens) {
      const models::Tokenizer* tok = runtime->tokenizer();
      absl::StatusOr<std::string> text =
          tok ? tok->Decode(r->prompt, false) : absl::StatusOr<std::string>("");
      session->prompt_texts_.push_back(text.ok() ? *text : "");
    } else {
      session->prompt_texts_.push_back(prompt.text);
    }
    for (int i = 0; i < request.n; ++i) {
      GenerationRequest choice = *r;
      choice.request_id = absl::StrCat(id, "-", validated.size());
      if (request.generate.sampling().has_seed()) {
        choice.sampling.seed = request.generate.sampling().seed() + static_cast<uint64_t>(i);
      } else if (i > 0) {
        choice.sampling.seed = RandomSeed();
      }
      choice.arrival = absl::Now();
      validated.push_back(std::move(choice));
    }
  }
  {
    absl::MutexLock lock(&session->mu_);
    session->unfinished_ = static_cast<int>(validated.size());
  }
  for (size_t c = 0; c < validated.size(); ++c) {
    session->prompt_tokens_.push_back(static_cast<int32_t>(validated[c].prompt.size()));
    auto observer = std::make_shared<ChoiceObserver>(session, static_cast<int>(c));
    absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
        session->scheduler_->Submit(std::move(validated[c]), std::move(observer));
    if (!handle.ok()) {
      *error = FromSubmitStatus(handle.status());
      session->Cancel();
      return handle.status();
    }
    session->handles_.push_back(*std::move(handle));
  }
  return session;
}

Session::~Session() { Cancel(); }

void Session::Push(int choice, GenerationUpdate update) {
  absl::MutexLock lock(&mu_);
  if (update.finished) --unfinished_;
  queue_.push_back({choice, std::move(update)});
}

std::vector<ChoiceUpdate> Session::Take(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  std::vector<ChoiceUpdate> out(std::make_move_iterator(queue_.begin()),
                                std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

bool Session::finished() const {
  absl::MutexLock lock(&mu_);
  return unfinished_ <= 0 && queue_.empty();
}

void Session::Cancel() {
  bool any = false;
  for (const auto& handle : handles_) {
    if (!handle->cancelled()) {
      handle->Cancel();
      any = true;
    }
  }
  if (any && scheduler_ != nullptr) scheduler_->Notify();
}

}  // namespace expertd::server::openai
