// TokenizePool: runs the tokenization of long text prompts off the serving
// threads. gRPC's callback threads and the HTTP API's workers are shared by
// every request: a multi-megabyte prompt tokenized inline holds one for
// seconds, and a few of them stall unrelated calls. Here such work runs on a
// fixed number of threads with a bounded queue; when the queue is full a new
// job is refused (ResourceExhausted, retryable) instead of waiting, so a burst
// of huge prompts costs at most `threads` cores and `max_queued` pending
// prompts, and never a serving thread.
//
// Thread-safe. The destructor stops taking jobs, runs every queued one (each
// finishes a call: none may be dropped) and joins the threads.
#ifndef EXPERTD_SERVER_TOKENIZE_POOL_H_
#define EXPERTD_SERVER_TOKENIZE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace expertd::server {

// Text prompts up to this many bytes are tokenized inline: that takes well
// under a millisecond, less than handing the job to another thread.
inline constexpr size_t kInlineTokenizeBytes = 16 << 10;

class TokenizePool {
 public:
  struct Options {
    int threads = 1;      // >= 1
    int max_queued = 32;  // jobs waiting for a thread; 0: only free threads take jobs
  };
  struct Stats {
    int running = 0;        // jobs on a thread now
    int queued = 0;         // jobs waiting for one
    int64_t completed = 0;  // jobs that ran (counted after the job returns,
                            // so after any signal the job itself gave)
    int64_t rejected = 0;   // Submit calls refused: the queue was full
  };

  explicit TokenizePool(Options options);
  ~TokenizePool();
  TokenizePool(const TokenizePool&) = delete;
  TokenizePool& operator=(const TokenizePool&) = delete;

  // Queues `job`; ResourceExhausted (naming the limit) when every thread is
  // busy and `max_queued` jobs wait already, or after the destructor began.
  absl::Status Submit(absl::AnyInvocable<void() &&> job);
  // Runs `job` on the pool and waits for it to end (for callers that block
  // anyway, as the HTTP API's handlers do). Same refusal as Submit.
  absl::Status RunAndWait(absl::AnyInvocable<void() &&> job);

  Stats stats() const;
  const Options& options() const { return options_; }

 private:
  void Work();
  // Queued jobs no free thread will take: negative when threads are free.
  int WaitingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_TOKENIZE_POOL_H_
