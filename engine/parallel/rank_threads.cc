#include "engine/parallel/rank_threads.h"

namespace expertd::engine::parallel {

RankThreads::RankThreads(int world_size) : world_size_(world_size), status_(world_size) {
  for (int r = 1; r < world_size; ++r) workers_.emplace_back([this, r] { WorkerLoop(r); });
}

RankThreads::~RankThreads() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : workers_) t.join();
}

std::vector<absl::Status> RankThreads::Run(const std::function<absl::Status(int)>& fn) {
  {
    absl::MutexLock lock(&mu_);
    job_ = &fn;
    pending_ = world_size_ - 1;
    ++generation_;
  }
  absl::Status mine = fn(0);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &pending_));
  job_ = nullptr;
  status_[0] = std::move(mine);
  return status_;
}

void RankThreads::WorkerLoop(int rank) {
  int64_t seen = 0;
  while (true) {
    const std::function<absl::Status(int)>* job = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&] { return stop_ || generation_ != seen; };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    absl::Status s = (*job)(rank);
    absl::MutexLock lock(&mu_);
    status_[rank] = std::move(s);
    --pending_;
  }
}

}  // namespace expertd::engine::parallel
