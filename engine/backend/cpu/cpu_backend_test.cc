#include "engine/backend/cpu/cpu_backend.h"

#include "engine/backend/backend_factory.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

TEST(CpuBackendTest, DeviceLimitIsEnforcedAndFreedMemoryReturns) {
  CpuBackend backend(CpuBackendOptions{2, 1 << 20});
  auto a = backend.Allocate(600 << 10, MemoryKind::kDevice);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 64, 0u);
  auto b = backend.Allocate(600 << 10, MemoryKind::kDevice);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  // Pinned host memory does not count against the device limit.
  auto pinned = backend.Allocate(600 << 10, MemoryKind::kHostPinned);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(backend.memory_stats().host_pinned_bytes_in_use, 600u << 10);
  a->Reset();
  EXPECT_EQ(backend.memory_stats().device_bytes_in_use, 0u);
  auto c = backend.Allocate(600 << 10, MemoryKind::kDevice);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(backend.memory_stats().device_bytes_peak, 600u << 10);
}

TEST(CpuBackendTest, BuffersMoveAndCopiesRoundTrip) {
  CpuBackend backend(CpuBackendOptions{1, 0});
  auto buf = backend.Allocate(16, MemoryKind::kDevice);
  ASSERT_TRUE(buf.ok());
  DeviceBuffer moved = std::move(*buf);
  float in[4] = {1, 2, 3, 4}, out[4] = {};
  ASSERT_TRUE(backend.CopyToDevice(moved.data(), in, sizeof(in)).ok());
  ASSERT_TRUE(backend.CopyToHost(out, moved.data(), sizeof(out)).ok());
  EXPECT_EQ(out[3], 4.0f);
  EXPECT_EQ(backend.memory_stats().device_bytes_in_use, 64u);
}

TEST(BackendFactoryTest, NamesBackends) {
  auto cpu = CreateBackend(BackendOptions{"cpu", 1, 0});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  // "cuda" depends on the build and the machine: engine/backend/backend_factory_test.cc.
  EXPECT_EQ(CreateBackend(BackendOptions{"tpu", 1, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace expertd::engine
