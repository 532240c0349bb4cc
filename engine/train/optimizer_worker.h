// OptimizerWorker: runs single-parameter AdamW updates on its own thread, in
// the order they are pushed, so that ES-MoE's per-expert updates overlap the
// rest of backward (trainer.h). Close() drains the queue and joins.
//
// Thread safety: Push from any thread; Close (or the destructor) once, after
// the last Push.
#ifndef EXPERTD_ENGINE_TRAIN_OPTIMIZER_WORKER_H_
#define EXPERTD_ENGINE_TRAIN_OPTIMIZER_WORKER_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace expertd::train {

class OptimizerWorker {
 public:
  // `update(index)` runs on the worker's thread for each pushed index.
  explicit OptimizerWorker(std::function<absl::Status(size_t)> update);
  ~OptimizerWorker();

  void Push(size_t index);
  // Waits for every pushed update; returns the first failure.
  absl::Status Close();

 private:
  void Run();

  const std::function<absl::Status(size_t)> update_;
  std::mutex mu_;
  std::condition_variable cv_;
  // State below is protected by mu_.
  std::deque<size_t> queue_;
  bool closed_ = false;
  absl::Status status_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_OPTIMIZER_WORKER_H_
