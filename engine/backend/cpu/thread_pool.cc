#include "engine/backend/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace expertd::engine {

// The start and end of a job are a handshake on atomics, all sequentially
// consistent, in two Dekker-style pairs:
// - a worker going to sleep counts itself in sleepers_, then (under mu_)
//   checks generation_; the caller bumps generation_, then reads sleepers_
//   and, if any, notifies under mu_: one of the two sees the other.
// - the caller going to sleep sets caller_asleep_, then (under mu_) checks
//   done_chunks_; the thread finishing the last chunk counts it, then reads
//   caller_asleep_ and, if set, notifies under mu_.
// A worker enters a job by counting itself in active_ and then reading
// open_; the caller closes a job by clearing open_ and then waiting for
// active_ to drain, so no worker reads the job's fields while they change.

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i)
    workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1);
    if (c >= chunks_) return;
    const int64_t begin = n_ * c / chunks_, end = n_ * (c + 1) / chunks_;
    if (begin < end) (*fn_)(begin, end);
    if (done_chunks_.fetch_add(1) + 1 == chunks_ && caller_asleep_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_all();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  if (workers_.empty() || max_chunks <= 1) {
    fn(0, n);
    return;
  }
  // Closed, with no worker inside (the last job's end made sure).
  fn_ = &fn;
  n_ = n;
  chunks_ = std::min<int64_t>(max_chunks, 8 * num_threads());
  next_chunk_.store(0);
  done_chunks_.store(0);
  open_.store(true);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    wake_.notify_all();
  }
  RunChunks();
  // Chunks other threads still run: spin briefly, then sleep (a worker the
  // OS descheduled must not have its core spun away).
  for (int i = 0; i < 4000 && done_chunks_.load() < chunks_; ++i) _mm_pause();
  if (done_chunks_.load() < chunks_) {
    caller_asleep_.store(true);
    {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [this] { return done_chunks_.load() == chunks_; });
    }
    caller_asleep_.store(false);
  }
  // Close the job; workers inside leave promptly (no chunk is left to take).
  open_.store(false);
  for (int i = 0; active_.load() != 0; ++i) {
    if (i < 4000) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = generation_.load();
  for (;;) {
    // Spin for the next job before sleeping.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
      _mm_pause();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
    }
    if (generation_.load() == seen) {
      sleepers_.fetch_add(1);
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      if (stop_) return;
    }
    seen = generation_.load();
    active_.fetch_add(1);
    if (open_.load()) RunChunks();
    active_.fetch_sub(1);
  }
}

}  // namespace expertd::engine
