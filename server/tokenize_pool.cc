#include "server/tokenize_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace expertd::server {

TokenizePool::TokenizePool(Options options) : options_(options) {
  const int n = std::max(1, options_.threads);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Work(); });
}

TokenizePool::~TokenizePool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

absl::Status TokenizePool::Submit(absl::AnyInvocable<void() &&> job) {
  absl::MutexLock lock(&mu_);
  const int waiting = WaitingLocked();
  if (stopping_ || waiting >= options_.max_queued) {
    ++stats_.rejected;
    return absl::ResourceExhaustedError(absl::StrCat(
        "too many long prompts are being tokenized (", stats_.running, " running, ",
        std::max(0, waiting), " queued; --tokenize_threads=", options_.threads,
        ", --tokenize_queue_length=", options_.max_queued, "): retry later"));
  }
  queue_.push_back(std::move(job));
  return absl::OkStatus();
}

absl::Status TokenizePool::RunAndWait(absl::AnyInvocable<void() &&> job) {
  absl::Notification done;
  absl::Status queued = Submit([&job, &done] {
    std::move(job)();
    done.Notify();
  });
  if (!queued.ok()) return queued;
  done.WaitForNotification();
  return absl::OkStatus();
}

int TokenizePool::WaitingLocked() const {
  // A queued job that a free thread (one not running a job, started or not)
  // will pick up does not wait: it is not counted against the queue's room.
  const int free_threads = static_cast<int>(threads_.size()) - stats_.running;
  return static_cast<int>(queue_.size()) - free_threads;
}

TokenizePool::Stats TokenizePool::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s = stats_;
  s.queued = std::max(0, WaitingLocked());
  return s;
}

void TokenizePool::Work() {
  auto has_work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || stopping_;
  };
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.Await(absl::Condition(&has_work));
    if (queue_.empty()) return;  // stopping, and every queued job ran
    absl::AnyInvocable<void() &&> job = std::move(queue_.front());
    queue_.pop_front();
    ++stats_.running;
    mu_.Unlock();
    std::move(job)();
    mu_.Lock();
    --stats_.running;
    ++stats_.completed;
  }
}

}  // namespace expertd::server
