// ThreadPool: a fixed set of workers for the CPU backend's data-parallel ops.
//
// ParallelFor splits [0, n) into contiguous chunks (at least `grain` long,
// about 8 per thread) that the calling thread and the workers take from a
// shared counter, so a thread that the OS deschedules does not hold up the
// others (the machine may be shared). Ops use it only to split OUTPUT
// elements, never a reduction, so results do not depend on which thread ran
// which chunk, nor on the thread count.
//
// Idle workers spin for a short while (~200 us) before sleeping, so the
// back-to-back small ops of a decode step do not pay a futex wake-up each.
// A job's start, its chunks and its end are atomics only: the mutex and the
// condition variables are touched only by a thread going to sleep and by
// whoever must wake it (a decode step ran ~150 futex calls and ~17 context
// switches when every job took the mutex four times).
//
// Thread safety: ParallelFor may be called by one thread at a time (the
// engine thread); it is not reentrant (fn must not call ParallelFor).
#ifndef EXPERTD_ENGINE_BACKEND_CPU_THREAD_POOL_H_
#define EXPERTD_ENGINE_BACKEND_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace expertd::engine {

class ThreadPool {
 public:
  // num_threads >= 1 counts the calling thread: 1 means no workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
  // `grain` long (except when n < grain), and returns when all are done.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();
  // Takes chunks until none is left.
  void RunChunks();

  std::vector<std::thread> workers_;

  std::mutex mu_;                  // only for sleeping and waking
  std::condition_variable wake_;   // workers asleep: a job was published (or stop_)
  std::condition_variable done_;   // the caller asleep: the job's chunks are done
  bool stop_ = false;              // under mu_
  std::atomic<int> sleepers_{0};   // workers asleep or about to sleep on wake_
  std::atomic<bool> caller_asleep_{false};
  // The current job. Written by the caller while closed with no worker
  // inside (active_ == 0); read by workers only after entering an open job.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunks_ = 0;
  std::atomic<bool> open_{false};        // workers may enter
  std::atomic<int> active_{0};           // workers inside (or checking open_)
  std::atomic<uint64_t> generation_{0};  // bumped per job; spun on by idle workers
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> done_chunks_{0};
};

// A ThreadPool-or-inline helper: runs fn(0, n) inline when pool is null.
inline void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                        const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool == nullptr) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, grain, fn);
  }
}

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_BACKEND_CPU_THREAD_POOL_H_
