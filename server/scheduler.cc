#include "server/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "engine/sampling/sampler.h"
#include "server/stop_matcher.h"

namespace expertd::server {

// One request's life on the scheduler thread (after Submit, before Finish).
struct Scheduler::Sequence {
  engine::SequenceId id = 0;
  GenerationRequest request;
  std::shared_ptr<GenerationObserver> observer;
  std::shared_ptr<RequestHandle> handle;
  int64_t reserved_blocks = 0;

  bool in_engine = false;                    // AddSequence done
  int64_t prefilled = 0;                     // prompt tokens already in the KV cache
  std::vector<int32_t> output;               // generated tokens
  std::unique_ptr<engine::Sampler> sampler;  // the request's RNG and penalty state
  std::unique_ptr<TextStreamer> text;
  std::unique_ptr<StopStringMatcher> stops;

  absl::Time first_scheduled = absl::InfiniteFuture();
  absl::Time first_token = absl::InfiniteFuture();
  absl::Time last_token = absl::InfiniteFuture();

  bool prefill_done() const { return prefilled == static_cast<int64_t>(request.prompt.size()); }
};

namespace {

engine::SamplingParams ToEngine(const GenerationRequest& r) {
  const SamplingOptions& s = r.sampling;
  engine::SamplingParams p;
  p.seed = s.seed;
  p.logprobs = r.logprobs;
  p.top_logprobs = r.logprobs ? r.top_logprobs : 0;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.logit_bias = s.logit_bias;
  return p;
}

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

Scheduler::Scheduler(StepEngine* engine, TextStreamerFactory text, SchedulerOptions options,
                     SchedulerListener* listener)
    : Scheduler(nullptr, engine, std::move(text), std::move(options), listener) {}

Scheduler::Scheduler(engine::Engine* engine, TextStreamerFactory text, SchedulerOptions options,
                     SchedulerListener* listener)
    : Scheduler(AdaptEngine(engine), nullptr, std::move(text), std::move(options), listener) {}

Scheduler::Scheduler(std::unique_ptr<StepEngine> owned, StepEngine* engine,
                     TextStreamerFactory text, SchedulerOptions options,
                     SchedulerListener* listener)
    : owned_engine_(std::move(owned)),
      engine_(owned_engine_ != nullptr ? owned_engine_.get() : engine),
      text_(std::move(text)),
      options_(std::move(options)),
      listener_(listener),
      clock_(options_.clock != nullptr ? options_.clock : RealClock::Get()),
      block_size_(engine_->kv_cache_stats().block_size),
      blocks_total_(engine_->kv_cache_stats().blocks_total),
      vocab_size_(engine_->vocab_size()) {}

Scheduler::~Scheduler() { Drain(absl::ZeroDuration()); }

void Scheduler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

int64_t Scheduler::BlocksFor(int64_t tokens) const {
  return (tokens + block_size_ - 1) / block_size_;
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Scheduler::Submit(
    GenerationRequest request, std::shared_ptr<GenerationObserver> observer) {
  auto seq = std::make_unique<Sequence>();
  seq->reserved_blocks =
      BlocksFor(static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens);
  if (seq->reserved_blocks > blocks_total_) {
    // Not RESOURCE_EXHAUSTED: that tells clients to retry, and this request
    // would not fit even into an empty cache.
    return absl::InvalidArgumentError(absl::StrCat(
        "stopping.max_new_tokens: prompt (", request.prompt.size(), " tokens) + max_new_tokens (",
        request.max_new_tokens, ") needs ", seq->reserved_blocks * block_size_,
        " tokens of KV cache but the server's whole KV cache (--kv_cache_bytes) holds ",
        blocks_total_ * block_size_, "; lower max_new_tokens or shorten the prompt"));
  }
  engine::SamplingParams params = ToEngine(request);
  absl::Status valid = engine::ValidateSamplingParams(params);
  if (!valid.ok()) return valid;  // validation upstream makes this unreachable
  seq->sampler = std::make_unique<engine::Sampler>(params, request.prompt);
  if (text_) seq->text = text_(request.skip_special_tokens);
  seq->stops = std::make_unique<StopStringMatcher>(request.stop);
  seq->request = std::move(request);
  seq->observer = std::move(observer);
  seq->handle = std::make_shared<RequestHandle>();
  std::shared_ptr<RequestHandle> handle = seq->handle;
  absl::MutexLock lock(&mu_);
  if (draining_ || stop_)
    return absl::UnavailableError("server is shutting down; retry on another replica");
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("server overloaded: ", waiting_.size(),
                     " requests already waiting (max_queue_length); retry later"));
  }
  seq->id = next_id_++;
  waiting_.push_back(std::move(seq));
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  wake_ = true;
  return handle;
}

void Scheduler::Notify() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

SchedulerStats Scheduler::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Scheduler::Drain(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    wake_ = true;
    auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stop_ || (waiting_.empty() && stats_.running == 0);
    };
    mu_.AwaitWithTimeout(absl::Condition(&idle), grace);
    stop_ = true;
  }
  if (thread_.joinable()) {
    thread_.join();
  } else {
    FinishAll(FinishReason::kCancelled, absl::OkStatus());  // never started
  }
}

bool Scheduler::WaitForWork() {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return stop_ || wake_ || !waiting_.empty() || !running_.empty();
  };
  // Running sequences need steps; otherwise sleep until Submit/Notify/stop.
  if (running_.empty()) mu_.Await(absl::Condition(&ready));
  wake_ = false;
  return !stop_;
}

void Scheduler::AuditAdmission(const char* where) {
  int64_t sum = 0;
  for (const auto& s : running_) sum += s->reserved_blocks;
  const engine::KvCacheStats kv = engine_->kv_cache_stats();
  const int64_t used = kv.blocks_total - kv.blocks_free;
  const bool ok = static_cast<int64_t>(running_.size()) <= options_.max_running &&
                  sum == reserved_blocks_ && reserved_blocks_ <= blocks_total_ &&
                  used <= reserved_blocks_;
  if (ok) return;
  ++admission_violations_;
  EXPERTD_LOG(Error, "scheduler admission bookkeeping is inconsistent")
      .With("where", where)
      .With("running", running_.size())
      .With("max_running", options_.max_running)
      .With("reserved_blocks", reserved_blocks_)
      .With("sum_of_reservations", sum)
      .With("engine_blocks_used", used)
      .With("blocks_total", blocks_total_);
}

void Scheduler::Loop() {
  while (WaitForWork()) {
    ReapCancelled();
    Admit();
    AuditAdmission("admit");
    if (running_.empty()) {
      PublishStats();
    } else {
      RunStep();
    }
  }
  FinishAll(FinishReason::kCancelled, absl::OkStatus());
}

void Scheduler::ReapCancelled() {
  const absl::Time now = clock_->Now();
  auto verdict = [now](const Sequence& s) -> absl::Status {
    if (s.handle->cancelled()) {
      if (s.handle->reason() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError("deadline exceeded");
      }
      return absl::CancelledError("cancelled by the client");
    }
    if (now >= s.request.deadline) return absl::DeadlineExceededError("deadline exceeded");
    return absl::OkStatus();
  };
  std::vector<std::unique_ptr<Sequence>> dead;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (!verdict(**it).ok()) {
        dead.push_back(std::move(*it));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : dead) {
    GenerationUpdate u;
    u.status = verdict(*s);
    Finish(s.get(), std::move(u));
  }
  for (size_t i = 0; i < running_.size();) {
    absl::Status v = verdict(*running_[i]);
    if (v.ok()) {
      ++i;
      continue;
    }
    std::unique_ptr<Sequence> seq = std::move(running_[i]);
    running_.erase(running_.begin() + i);
    {
      absl::MutexLock lock(&mu_);
      stats_.running = static_cast<int64_t>(running_.size());
    }
    GenerationUpdate u;
    u.status = v;
    Finish(seq.get(), std::move(u));
  }
}

void Scheduler::Admit() {
  std::vector<std::unique_ptr<Sequence>> admitted;
  {
    absl::MutexLock lock(&mu_);
    while (!waiting_.empty() &&
           static_cast<int64_t>(running_.size() + admitted.size()) < options_.max_running &&
           reserved_blocks_ + waiting_.front()->reserved_blocks <= blocks_total_) {
      reserved_blocks_ += waiting_.front()->reserved_blocks;
      admitted.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    stats_.waiting = static_cast<int64_t>(waiting_.size());
    stats_.running = static_cast<int64_t>(running_.size() + admitted.size());
  }
  for (auto& seq : admitted) {
    absl::Status s = engine_->AddSequence(seq->id);
    if (!s.ok()) {  // a bug, not a user error: fail this request only
      reserved_blocks_ -= seq->reserved_blocks;
      GenerationUpdate u;
      u.finish_reason = FinishReason::kError;
      u.error_message = std::string(s.message());
      Finish(seq.get(), std::move(u));
      continue;
    }
    seq->in_engine = true;
    running_.push_back(std::move(seq));
  }
}

void Scheduler::RunStep() {
  engine::StepRequest step;
  std::vector<Sequence*> in_step;
  int64_t budget = options_.max_batch_tokens;
  // Decodes first (one token each, oldest first), then prefill chunks.
  for (auto& s : running_) {
    if (budget == 0) break;
    if (!s->prefill_done() || s->output.empty()) continue;
    step.chunks.push_back({s->id, {s->output.back()}, false});
    in_step.push_back(s.get());
    --budget;
  }
  const size_t decodes = step.chunks.size();
  for (auto& s : running_) {
    if (budget == 0) break;
    if (s->prefill_done()) continue;
    const int64_t remaining = static_cast<int64_t>(s->request.prompt.size()) - s->prefilled;
    const int64_t n = std::min(remaining, budget);
    engine::SequenceChunk chunk{s->id, {}, false};
    chunk.tokens.assign(s->request.prompt.begin() + s->prefilled,
                        s->request.prompt.begin() + s->prefilled + n);
    step.chunks.push_back(std::move(chunk));
    in_step.push_back(s.get());
    budget -= n;
  }
  const absl::Time start = clock_->Now();
  for (Sequence* s : in_step) {
    if (s->first_scheduled == absl::InfiniteFuture()) s->first_scheduled = start;
  }
  int64_t prompt_tokens = 0;  // chunks after the decodes are prefill chunks
  for (size_t k = decodes; k < step.chunks.size(); ++k) {
    prompt_tokens += static_cast<int64_t>(step.chunks[k].tokens.size());
  }
  absl::StatusOr<engine::StepResult> result = engine_->Step(step);
  int64_t generated_tokens = 0;
  const absl::Time now = clock_->Now();
  ++steps_;
  if (result.ok()) {
    // Published before any client hears about this step's tokens, so a stats
    // read that follows a response already counts the step.
    tokens_processed_ += prompt_tokens + static_cast<int64_t>(decodes);
    absl::MutexLock lock(&mu_);
    stats_.tokens_processed = tokens_processed_;
  }
  if (!result.ok()) {
    EXPERTD_LOG(Error, "engine step failed")
        .With("error", result.status())
        .With("sequences", in_step.size());
    for (size_t i = 0; i < running_.size();) {
      if (std::find(in_step.begin(), in_step.end(), running_[i].get()) == in_step.end()) {
        ++i;
        continue;
      }
      GenerationUpdate u;
      u.finish_reason = FinishReason::kError;
      u.error_message = absl::StrCat("engine step failed: ", result.status().message());
      Finish(running_[i].get(), std::move(u));
      running_.erase(running_.begin() + i);
    }
  } else {
    for (size_t k = 0; k < in_step.size(); ++k) {
      Sequence* s = in_step[k];
      const engine::SequenceResult& r = result->sequences[k];
      if (!s->prefill_done()) {
        s->prefilled += static_cast<int64_t>(step.chunks[k].tokens.size());
        if (!s->prefill_done()) continue;  // logits of a partial prefill are not used
      }
      HandleLogits(s, r.logits.data(), now);
      ++generated_tokens;
    }
    // Drop finished sequences (Finish() cleared their observer).
    running_.erase(
        std::remove_if(running_.begin(), running_.end(),
                       [](const std::unique_ptr<Sequence>& s) { return s->observer == nullptr; }),
        running_.end());
  }
  AuditAdmission("step");
  SchedulerStats snapshot = PublishStats();
  if (listener_ != nullptr) listener_->OnStep(snapshot, prompt_tokens, generated_tokens);
}

SchedulerStats Scheduler::PublishStats() {
  engine::KvCacheStats kv = engine_->kv_cache_stats();
  absl::MutexLock lock(&mu_);
  stats_.running = static_cast<int64_t>(running_.size());
  stats_.waiting = static_cast<int64_t>(waiting_.size());
  stats_.kv_blocks_total = kv.blocks_total;
  stats_.kv_blocks_free = kv.blocks_free;
  stats_.kv_cache_usage =
      kv.blocks_total > 0 ? static_cast<double>(kv.blocks_total - kv.blocks_free) / kv.blocks_total
                          : 0.0;
  stats_.steps = steps_;
  stats_.tokens_processed = tokens_processed_;
  stats_.admission_violations = admission_violations_;
  return stats_;
}

void Scheduler::HandleLogits(Sequence* s, const float* logits, absl::Time now) {
  const GenerationRequest& req = s->request;
  engine::SampleResult tok = s->sampler->Sample(absl::MakeConstSpan(logits, vocab_size_));
  if (s->first_token == absl::InfiniteFuture()) {
    s->first_token = now;
    if (listener_ != nullptr) listener_->OnFirstToken(now - req.arrival);
  } else if (listener_ != nullptr) {
    listener_->OnInterTokenLatency(now - s->last_token);
  }
  s->last_token = now;
  s->output.push_back(tok.token);

  GenerationUpdate u;
  u.token_ids.push_back(tok.token);
  if (req.logprobs) {
    TokenLogprobs lp{tok.token, tok.logprob, {}};
    for (const engine::TokenLogprob& t : tok.top) lp.top.emplace_back(t.token, t.logprob);
    u.logprobs.push_back(std::move(lp));
  }
  const int32_t generated = static_cast<int32_t>(s->output.size());
  const bool may_stop = generated > req.min_new_tokens || generated >= req.max_new_tokens;
  FinishReason reason = FinishReason::kNone;
  if (may_stop && Contains(req.stop_token_ids, tok.token)) {
    reason = FinishReason::kStop;
    u.matched_stop_token_id = tok.token;
  } else if (may_stop && !req.ignore_eos && Contains(options_.eos_token_ids, tok.token)) {
    reason = FinishReason::kEos;
  }
  // Text: stop tokens and EOS are not part of the text.
  if (reason == FinishReason::kNone && s->text != nullptr) {
    StopStringMatcher::Result r = s->stops->Append(s->text->Push(tok.token));
    u.text = std::move(r.emit);
    if (r.stopped) {  // stop strings apply from the first token
      reason = FinishReason::kStop;
      u.matched_stop_string = r.matched;
    }
  }
  if (reason == FinishReason::kNone &&
      (generated >= req.max_new_tokens ||
       static_cast<int64_t>(req.prompt.size()) + generated >= options_.max_context)) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) {
    s->observer->OnUpdate(std::move(u));
    return;
  }
  if (reason != FinishReason::kStop || u.matched_stop_string.empty()) {
    if (s->text != nullptr && !s->stops->stopped()) {
      StopStringMatcher::Result r = s->stops->Append(s->text->Flush());
      u.text += r.emit;
      if (!r.stopped) u.text += s->stops->Flush();
    }
  }
  u.finish_reason = reason;
  Finish(s, std::move(u));
}

void Scheduler::Finish(Sequence* s, GenerationUpdate u) {
  const absl::Time now = clock_->Now();
  if (s->in_engine) {
    absl::Status rm = engine_->RemoveSequence(s->id);
    if (!rm.ok()) EXPERTD_LOG(Error, "RemoveSequence failed").With("error", rm);
    s->in_engine = false;
    reserved_blocks_ -= s->reserved_blocks;
  }
  const GenerationRequest& req = s->request;
  u.finished = true;
  u.prompt_tokens = static_cast<int32_t>(req.prompt.size());
  u.completion_tokens = static_cast<int32_t>(s->output.size());
  const absl::Time scheduled = std::min(s->first_scheduled, now);
  u.timing.queue_time = scheduled - req.arrival;
  if (s->first_token != absl::InfiniteFuture()) {
    u.timing.time_to_first_token = s->first_token - req.arrival;
    u.timing.decode_time = s->last_token - s->first_token;
  }
  u.timing.total_time = now - req.arrival;
  if (listener_ != nullptr) {
    FinishedRequestInfo info;
    info.finish_reason = u.finish_reason;
    info.code = u.status.code();
    info.prompt_tokens = u.prompt_tokens;
    info.completion_tokens = u.completion_tokens;
    info.max_new_tokens = req.max_new_tokens;
    info.timing = u.timing;
    if (s->first_token != absl::InfiniteFuture()) info.prefill_time = s->first_token - scheduled;
    listener_->OnRequestFinished(info);
  }
  std::shared_ptr<GenerationObserver> observer = std::move(s->observer);
  s->observer = nullptr;
  if (observer != nullptr) observer->OnUpdate(std::move(u));
}

void Scheduler::FinishAll(FinishReason reason, const absl::Status& status) {
  std::deque<std::unique_ptr<Sequence>> waiting;
  {
    absl::MutexLock lock(&mu_);
    waiting.swap(waiting_);
  }
  auto end = [&](Sequence* s) {
    GenerationUpdate u;
    u.status = status;
    u.finish_reason = status.ok() ? reason : FinishReason::kNone;
    Finish(s, std::move(u));
  };
  for (auto& s : running_) end(s.get());
  for (auto& s : waiting) end(s.get());
  running_.clear();
  absl::MutexLock lock(&mu_);
  stats_.running = 0;
  stats_.waiting = 0;
}

}  // namespace expertd::server
