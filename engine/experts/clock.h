// Clock: the only source of wall time in engine/experts, injectable so tests
// control it (a FakeClock never moves unless told to). Used for stall and
// transfer timings; cache policies use logical time (access counts) instead,
// so their decisions never depend on wall time.
#ifndef EXPERTD_ENGINE_EXPERTS_CLOCK_H_
#define EXPERTD_ENGINE_EXPERTS_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace expertd::engine {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds since an arbitrary epoch. Thread-safe.
  virtual int64_t NowNanos() const = 0;
};

// std::chrono::steady_clock. Thread-safe; the shared instance lives forever.
class RealClock final : public Clock {
 public:
  int64_t NowNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static RealClock* Get() {
    static RealClock* clock = new RealClock();
    return clock;
  }
};

// A clock tests move by hand. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_nanos = 0) : now_(start_nanos) {}
  int64_t NowNanos() const override { return now_.load(std::memory_order_relaxed); }
  void AdvanceNanos(int64_t delta) { now_.fetch_add(delta, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_CLOCK_H_
