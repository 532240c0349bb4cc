// RankThreads: runs one function per rank of a virtual-device group, rank 0
// on the calling thread and ranks 1..D-1 on persistent worker threads (one
// per rank, so per-thread backend state stays put), and waits for all.
//
// Thread safety: Run is called by one thread at a time (the engine thread).
#ifndef EXPERTD_ENGINE_PARALLEL_RANK_THREADS_H_
#define EXPERTD_ENGINE_PARALLEL_RANK_THREADS_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace expertd::engine::parallel {

class RankThreads {
 public:
  explicit RankThreads(int world_size);
  ~RankThreads();  // joins the workers
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int world_size() const { return world_size_; }

  // Runs fn(rank) for every rank concurrently; returns each rank's status.
  // fn must return on every rank (collectives with deadlines guarantee it).
  std::vector<absl::Status> Run(const std::function<absl::Status(int rank)>& fn);

 private:
  void WorkerLoop(int rank);

  const int world_size_;
  absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  const std::function<absl::Status(int)>* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<absl::Status> status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace expertd::engine::parallel

#endif  // EXPERTD_ENGINE_PARALLEL_RANK_THREADS_H_
