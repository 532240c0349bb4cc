// Scheduler: continuous batching over one engine (a StepEngine,
// server/step_engine.h: engine::Engine in production, a fake in tests).
//
// Policy (docs/serving.md):
// - First come, first served. Requests wait in a bounded queue; one that
//   finds the queue full is refused at once with RESOURCE_EXHAUSTED (retry
//   later); one whose prompt + max_new_tokens could never fit the whole KV
//   cache is refused with INVALID_ARGUMENT (retrying cannot help).
// - Admission reserves KV blocks for the request's worst case (prompt +
//   max_new_tokens), so a running sequence never runs out of cache: no
//   preemption, no OOM. Requests are admitted in arrival order while the
//   reservation fits and fewer than max_running sequences run.
// - Every engine step carries at most max_batch_tokens tokens: first one
//   decode token for each running sequence (oldest first), then prefill
//   chunks of admitted prompts (oldest first) in the remaining budget. Long
//   prompts are thus split across steps (chunked prefill) and never stall the
//   decodes of other sequences.
// - Cancellation and deadlines are checked before every step: such a
//   sequence leaves the batch and frees its KV blocks within one step.
//
// - A failed engine step ends the requests in that step with
//   FinishReason::kError and the engine's message; the scheduler goes on
//   serving the others and later requests.
//
// Threading: one scheduler thread owns the engine and every sequence; Submit,
// Cancel, stats and Drain may be called from any thread.
#ifndef EXPERTD_SERVER_SCHEDULER_H_
#define EXPERTD_SERVER_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "engine/engine.h"
#include "engine/sampling/sampler.h"
#include "server/generation_request.h"
#include "server/generation_update.h"
#include "server/step_engine.h"
#include "server/text_streamer.h"

namespace expertd::server {

struct SchedulerOptions {
  int64_t max_batch_tokens = 2048;
  int64_t max_running = 64;
  int64_t max_queue = 256;
  std::vector<int32_t> eos_token_ids;
  int64_t max_context = 0;  // the model's max_position_embeddings
  // Every time the scheduler reads (deadlines, timings) comes from here; it
  // must outlive the scheduler. Null: RealClock. The Drain grace period is
  // a blocking wait and uses real time.
  Clock* clock = nullptr;
};

// Counts for GetServerInfo and /metrics.
struct SchedulerStats {
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_cache_usage = 0;  // fraction of KV blocks in use
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;
  int64_t steps = 0;
  int64_t tokens_processed = 0;  // prompt + decode tokens through the engine
  // Times the admission bookkeeping disagreed with the slots (running count
  // over max_running, reserved KV blocks not the sum of the running
  // sequences' reservations or over the cache, the engine using more blocks
  // than reserved). Always 0 unless the scheduler has a bug; checked after
  // every admission and every step, logged when it happens.
  int64_t admission_violations = 0;
};

// A finished request's numbers, for metrics.
struct FinishedRequestInfo {
  FinishReason finish_reason = FinishReason::kNone;
  absl::StatusCode code = absl::StatusCode::kOk;  // CANCELLED / DEADLINE_EXCEEDED
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t max_new_tokens = 0;
  GenerationTiming timing;
  absl::Duration prefill_time;  // first scheduled -> first token (0 if none)
};

// Optional hooks (metrics). Called on the scheduler thread; must be cheap.
class SchedulerListener {
 public:
  virtual ~SchedulerListener() = default;
  // After every engine step: prompt tokens computed (prefill chunks) and
  // tokens generated (sampled) in it.
  virtual void OnStep(const SchedulerStats& stats, int64_t prompt_tokens,
                      int64_t generated_tokens) = 0;
  // A request's first token (arrival -> token) and each later one.
  virtual void OnFirstToken(absl::Duration time_to_first_token) = 0;
  virtual void OnInterTokenLatency(absl::Duration latency) = 0;
  // Exactly once per submitted request.
  virtual void OnRequestFinished(const FinishedRequestInfo& info) = 0;
};

// Returned by Submit; Cancel() through it. Thread-safe.
class RequestHandle {
 public:
  // The client went away (CANCELLED).
  void Cancel() { Cancel(absl::StatusCode::kCancelled); }
  // Ends the request with `why`: kCancelled (the client left) or
  // kDeadlineExceeded (the RPC layer saw the deadline pass before the
  // scheduler did). The first reason given wins.
  void Cancel(absl::StatusCode why) {
    int expected = 0;
    reason_.compare_exchange_strong(expected, static_cast<int>(why));
  }
  bool cancelled() const { return reason_.load() != 0; }
  absl::StatusCode reason() const { return static_cast<absl::StatusCode>(reason_.load()); }

 private:
  std::atomic<int> reason_{0};  // 0 = running, else an absl::StatusCode
};

class Scheduler {
 public:
  // `engine` and `listener` (may be null) must outlive the scheduler;
  // `text` may be null (then updates carry token ids only).
  Scheduler(StepEngine* engine, TextStreamerFactory text, SchedulerOptions options,
            SchedulerListener* listener);
  // The same over an engine::Engine (adapted with AdaptEngine).
  Scheduler(engine::Engine* engine, TextStreamerFactory text, SchedulerOptions options,
            SchedulerListener* listener);
  ~Scheduler();  // Stops (cancelling whatever still runs).

  void Start();

  // Queues a validated request. RESOURCE_EXHAUSTED (queue full: retry
  // later), INVALID_ARGUMENT (prompt + max_new_tokens can never fit the whole
  // KV cache: retrying cannot help; the message names the limit),
  // UNAVAILABLE (draining). On success the observer will get updates,
  // the last with finished = true (exactly once).
  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit(
      GenerationRequest request, std::shared_ptr<GenerationObserver> observer);

  // Wakes the loop so a cancelled handle is reaped promptly.
  void Notify();

  // Refuses new requests, lets queued and running ones finish for `grace`,
  // then ends the rest with FinishReason::kCancelled, and stops the thread.
  void Drain(absl::Duration grace);

  SchedulerStats stats() const;

  // Tokens of KV cache the whole cache holds (blocks * block size): the most
  // prompt + max_new_tokens one request may ask for.
  int64_t kv_capacity_tokens() const { return blocks_total_ * block_size_; }

 private:
  struct Sequence;

  Scheduler(std::unique_ptr<StepEngine> owned, StepEngine* engine, TextStreamerFactory text,
            SchedulerOptions options, SchedulerListener* listener);
  void Loop();
  bool WaitForWork();
  void ReapCancelled();
  void Admit();
  void RunStep();
  void HandleLogits(Sequence* seq, const float* logits, absl::Time now);
  void Finish(Sequence* seq, GenerationUpdate update);
  void FinishAll(FinishReason reason, const absl::Status& status);
  SchedulerStats PublishStats();  // refreshes stats_ from the engine; returns a copy
  int64_t BlocksFor(int64_t tokens) const;
  void AuditAdmission(const char* where);

  const std::unique_ptr<StepEngine> owned_engine_;  // null unless adapted here
  StepEngine* const engine_;
  const TextStreamerFactory text_;
  const SchedulerOptions options_;
  SchedulerListener* const listener_;
  Clock* const clock_;
  const int64_t block_size_;
  const int64_t blocks_total_;
  const int32_t vocab_size_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Sequence>> waiting_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);

  // Owned by the scheduler thread.
  std::vector<std::unique_ptr<Sequence>> running_;
  int64_t reserved_blocks_ = 0;  // KV blocks promised to running sequences
  int64_t steps_ = 0;
  int64_t tokens_processed_ = 0;
  int64_t admission_violations_ = 0;

  std::thread thread_;
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_SCHEDULER_H_
