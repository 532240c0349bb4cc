#include "engine/experts/transfer_pool.h"

#include <algorithm>
#include <cassert>

namespace expertd::engine {

absl::Status TransferCompletion::Wait() const {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

bool TransferCompletion::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void TransferCompletion::Finish(absl::Status status) {
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
  done_ = true;
}

TransferPool::TransferPool(int num_threads) {
  assert(num_threads >= 1);
  for (int i = 0; i < num_threads; ++i) threads_.emplace_back([this] { WorkerLoop(); });
}

TransferPool::~TransferPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

std::shared_ptr<TransferCompletion> TransferPool::Submit(Priority priority, Job job) {
  auto task = std::make_shared<Task>();
  task->job = std::move(job);
  task->completion = std::make_shared<TransferCompletion>();
  absl::MutexLock lock(&mu_);
  queues_[priority].push_back(task);
  return task->completion;
}

void TransferPool::Promote(const std::shared_ptr<TransferCompletion>& completion) {
  absl::MutexLock lock(&mu_);
  auto& prefetch = queues_[kPrefetch];
  auto it = std::find_if(prefetch.begin(), prefetch.end(),
                         [&](const auto& task) { return task->completion == completion; });
  if (it == prefetch.end()) return;  // started already, or not a queued prefetch
  queues_[kDemand].push_back(std::move(*it));
  prefetch.erase(it);
}

size_t TransferPool::queued() const {
  absl::MutexLock lock(&mu_);
  return queues_[kDemand].size() + queues_[kPrefetch].size();
}

std::shared_ptr<TransferPool::Task> TransferPool::Next() {
  for (auto& q : queues_) {
    if (q.empty()) continue;
    std::shared_ptr<Task> task = std::move(q.front());
    q.pop_front();
    return task;
  }
  return nullptr;
}

void TransferPool::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Task> task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queues_[kDemand].empty() || !queues_[kPrefetch].empty();
      };
      mu_.Await(absl::Condition(&ready));
      task = Next();
      if (task == nullptr) {
        if (stopping_) return;
        continue;
      }
    }
    task->completion->Finish(task->job());
  }
}

}  // namespace expertd::engine
