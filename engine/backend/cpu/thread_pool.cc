#include "engine/backend/cpu/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace expertd::engine {

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
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) return;
    const int64_t begin = n_ * c / chunks_, end = n_ * (c + 1) / chunks_;
    if (begin < end) (*fn_)(begin, end);
    if (done_chunks_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks_) {
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunks_ = std::min<int64_t>(max_chunks, 8 * num_threads());
    next_chunk_.store(0, std::memory_order_relaxed);
    done_chunks_.store(0, std::memory_order_relaxed);
    open_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks();
  // Wait for chunks other threads are still running: spin briefly, then sleep.
  for (int i = 0; i < 4000 && done_chunks_.load(std::memory_order_acquire) < chunks_; ++i)
    _mm_pause();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return done_chunks_.load(std::memory_order_acquire) == chunks_; });
  // Close the job; workers that entered leave promptly (nothing left to take).
  open_ = false;
  done_.wait(lock, [this] { return active_ == 0; });
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next job before sleeping on the condition variable.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
      _mm_pause();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock,
                 [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      if (!open_) continue;  // the caller already finished that job
      ++active_;
    }
    RunChunks();
    std::lock_guard<std::mutex> lock(mu_);
    if (--active_ == 0) done_.notify_all();
  }
}

}  // namespace expertd::engine
