#include "engine/train/device_memory.h"

#include <thread>

#include "gtest/gtest.h"

namespace expertd::train {
namespace {

TEST(DeviceMemoryTrackerTest, CountsAndRefusesPastTheLimit) {
  DeviceMemoryTracker t(100);
  ASSERT_TRUE(t.Reserve(60, "weights").ok());
  absl::Status st = t.Reserve(41, "expert 3 of layer 1");
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("expert 3 of layer 1"), std::string::npos) << st;
  EXPECT_NE(st.message().find("41 bytes"), std::string::npos) << st;
  EXPECT_EQ(t.in_use(), 60);  // nothing reserved on failure
  ASSERT_TRUE(t.Reserve(40, "activations").ok());
  EXPECT_EQ(t.available(), 0);
  t.Release(70);
  EXPECT_EQ(t.in_use(), 30);
  EXPECT_EQ(t.peak(), 100);
  t.ResetPeak();
  EXPECT_EQ(t.peak(), 30);
}

TEST(DeviceMemoryTrackerTest, UnlimitedStillCounts) {
  DeviceMemoryTracker t(0);
  ASSERT_TRUE(t.Reserve(1ll << 40, "huge").ok());
  EXPECT_EQ(t.peak(), 1ll << 40);
}

TEST(DeviceReservationTest, ReleasesOnDestructionAndMove) {
  DeviceMemoryTracker t(100);
  {
    DeviceReservation a;
    ASSERT_TRUE(a.Acquire(&t, 50, "a").ok());
    DeviceReservation b = std::move(a);
    EXPECT_EQ(a.bytes(), 0);
    EXPECT_EQ(t.in_use(), 50);
  }
  EXPECT_EQ(t.in_use(), 0);
  DeviceReservation none;
  EXPECT_TRUE(none.Acquire(nullptr, 1 << 30, "uncounted").ok());
}

TEST(DeviceMemoryTrackerTest, ReserveWaitingWaitsForARelease) {
  DeviceMemoryTracker t(100);
  ASSERT_TRUE(t.Reserve(80, "slot 0").ok());
  // Can never fit: fails at once instead of waiting.
  EXPECT_EQ(t.ReserveWaiting(50, 60, "slot 1").code(), absl::StatusCode::kResourceExhausted);
  std::thread waiter([&] { EXPECT_TRUE(t.ReserveWaiting(50, 0, "slot 1").ok()); });
  t.Release(80);  // the waiter proceeds whether it started waiting before or after
  waiter.join();
  EXPECT_EQ(t.in_use(), 50);
}

}  // namespace
}  // namespace expertd::train
