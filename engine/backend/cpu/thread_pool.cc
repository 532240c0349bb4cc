#include "engine/backend/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <immintrin.h>

namespace expertd::engine {

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < std::max(1, num_threads); ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunRange(int part) {
  int64_t begin = n_ * part / parts_;
  int64_t end = n_ * (part + 1) / parts_;
  if (begin < end) (*fn_)(begin, end);
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_parts = std::max<int64_t>(1, n / grain);
  int parts = static_cast<int>(std::min<int64_t>(num_threads(), max_parts));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    parts_ = parts;
    pending_.store(parts - 1, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunRange(0);
  // Spin briefly (ops are short), then sleep until the workers finish.
  for (int i = 0; i < 4000 && pending_.load(std::memory_order_acquire) > 0; ++i) _mm_pause();
  if (pending_.load(std::memory_order_acquire) > 0) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next job before sleeping on the condition variable.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    for (int i = 0; generation_.load(std::memory_order_acquire) == seen; ++i) {
      _mm_pause();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
    }
    int part;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      part = index;
      if (part >= parts_) continue;  // this job has fewer parts than threads
    }
    RunRange(part);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace expertd::engine
