#include "base/clock.h"

#include "gtest/gtest.h"

namespace expertd {
namespace {

TEST(FakeClockTest, MovesOnlyWhenAdvancedAndBothReadingsTogether) {
  FakeClock clock(1000);
  EXPECT_EQ(clock.NowNanos(), 1000);
  EXPECT_EQ(clock.Now(), absl::FromUnixNanos(1000));
  EXPECT_EQ(clock.NowNanos(), 1000);  // reading does not move it
  clock.Advance(absl::Milliseconds(5));
  EXPECT_EQ(clock.NowNanos(), 1000 + 5'000'000);
  EXPECT_EQ(clock.Now(), absl::FromUnixNanos(1000) + absl::Milliseconds(5));
  clock.AdvanceNanos(7);
  EXPECT_EQ(clock.NowNanos(), 1000 + 5'000'007);
}

TEST(RealClockTest, MonotonicAndCloseToAbslNow) {
  Clock* clock = RealClock::Get();
  EXPECT_EQ(clock, RealClock::Get());
  const int64_t a = clock->NowNanos();
  const int64_t b = clock->NowNanos();
  EXPECT_LE(a, b);
  // Both read the same system time; generous bound for a loaded machine.
  EXPECT_LT(absl::AbsDuration(clock->Now() - absl::Now()), absl::Seconds(60));
}

}  // namespace
}  // namespace expertd
