// TransferPool: the asynchronous side of expert offloading. A fixed pool of
// worker threads runs transfer jobs (pack -> host reads, host -> device
// copies), so loads overlap the engine's compute. Two queues: demand jobs
// (the engine is or will soon be waiting) always start before prefetch jobs,
// and a queued prefetch the engine starts waiting for can be promoted.
//
//   auto done = transfers.Submit(TransferPool::kPrefetch, [] { return Load(); });
//   ...
//   transfers.Promote(done);      // the engine needs it now
//   absl::Status s = done->Wait();
//
// Thread safety: every method is thread-safe. The destructor runs every job
// already submitted (so completions are always signalled), then joins.
#ifndef EXPERTD_ENGINE_EXPERTS_TRANSFER_POOL_H_
#define EXPERTD_ENGINE_EXPERTS_TRANSFER_POOL_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace expertd::engine {

// The result of one job, signalled once.
class TransferCompletion {
 public:
  // Blocks until the job has run; returns its status.
  absl::Status Wait() const;
  bool done() const;

 private:
  friend class TransferPool;
  void Finish(absl::Status status);

  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class TransferPool {
 public:
  enum Priority { kDemand = 0, kPrefetch = 1 };
  using Job = std::function<absl::Status()>;

  // REQUIRES: num_threads >= 1.
  explicit TransferPool(int num_threads);
  ~TransferPool();
  TransferPool(const TransferPool&) = delete;
  TransferPool& operator=(const TransferPool&) = delete;

  std::shared_ptr<TransferCompletion> Submit(Priority priority, Job job);
  // Moves a still-queued prefetch job to the back of the demand queue (it
  // leaves the prefetch queue); no-op once it started or if it is already
  // a demand job.
  void Promote(const std::shared_ptr<TransferCompletion>& completion);

  int num_threads() const { return static_cast<int>(threads_.size()); }
  // Jobs waiting to start (both queues); each job counts once, promoted or not.
  size_t queued() const;

 private:
  struct Task {
    Job job;
    std::shared_ptr<TransferCompletion> completion;
  };
  void WorkerLoop();
  std::shared_ptr<Task> Next() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // A task is in exactly one queue until a worker pops it to run it.
  std::deque<std::shared_ptr<Task>> queues_[2] ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_TRANSFER_POOL_H_
