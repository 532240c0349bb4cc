// Clock: the one source of time for code that tests want to control —
// deadlines, request timings, stall and transfer timings. Production code gets
// RealClock::Get(); tests pass a FakeClock, which never moves unless told to,
// so a test of a deadline advances time instead of sleeping.
//
// Two readings, because they answer different questions:
//   NowNanos(): monotonic, for intervals inside this process;
//   Now():      wall time, for instants that come from outside (a gRPC
//               deadline is a wall-clock instant) and timestamps.
// A FakeClock moves both together. Cache policies use logical time (access
// counts) instead, so their decisions never depend on time at all.
//
// Blocking waits with a timeout (e.g. a drain grace period) still use real
// time: a fake clock cannot wake a sleeping thread.
#ifndef EXPERTD_BASE_CLOCK_H_
#define EXPERTD_BASE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace expertd {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds since an arbitrary epoch. Thread-safe.
  virtual int64_t NowNanos() const = 0;
  // Wall-clock time. Thread-safe.
  virtual absl::Time Now() const = 0;
};

// std::chrono::steady_clock and absl::Now(). Thread-safe; the shared instance
// lives forever.
class RealClock final : public Clock {
 public:
  int64_t NowNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  absl::Time Now() const override { return absl::Now(); }
  static RealClock* Get() {
    static RealClock* clock = new RealClock();
    return clock;
  }
};

// A clock tests move by hand. Now() is the Unix epoch plus NowNanos().
// Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_nanos = 0) : now_(start_nanos) {}
  int64_t NowNanos() const override { return now_.load(std::memory_order_relaxed); }
  absl::Time Now() const override { return absl::FromUnixNanos(NowNanos()); }
  void AdvanceNanos(int64_t delta) { now_.fetch_add(delta, std::memory_order_relaxed); }
  // REQUIRES: d is finite.
  void Advance(absl::Duration d) { AdvanceNanos(absl::ToInt64Nanoseconds(d)); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace expertd

#endif  // EXPERTD_BASE_CLOCK_H_
