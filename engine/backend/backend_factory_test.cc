// CreateBackend's contract for "cuda" in both kinds of build, and the
// Backend's default asynchronous copy (what the CPU backend uses).
#include "engine/backend/backend_factory.h"

#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_features.h"
#include "gtest/gtest.h"
#ifdef EXPERTD_WITH_CUDA
#include "engine/backend/cuda/cuda_test_util.h"
#endif

namespace expertd::engine {
namespace {

TEST(BackendFactoryTest, UnknownNameIsInvalidArgument) {
  EXPECT_EQ(CreateBackend(BackendOptions{"tpu", 1, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// bf16 activations: the CPU backend runs them exactly when the CPU has
// AVX-512-BF16 (a clear FailedPrecondition otherwise); CUDA refuses them in
// any build, before looking for a device.
TEST(BackendFactoryTest, Bf16ActivationsNeedTheCpuBackendWithAvx512Bf16) {
  BackendOptions o{"cpu", 1, 0};
  o.matmul_activations = MatmulActivations::kBF16;
  auto cpu = CreateBackend(o);
  if (cpu::CpuSupportsBf16Dot()) {
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_EQ((*cpu)->matmul_activations(), MatmulActivations::kBF16);
  } else {
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kFailedPrecondition) << cpu.status();
    EXPECT_NE(cpu.status().message().find("AVX-512-BF16"), std::string::npos) << cpu.status();
  }
  o.name = "cuda";
  auto cuda = CreateBackend(o);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument) << cuda.status();
  MatmulActivations parsed = MatmulActivations::kF32;
  EXPECT_TRUE(ParseMatmulActivations("bf16", &parsed));
  EXPECT_EQ(parsed, MatmulActivations::kBF16);
  EXPECT_FALSE(ParseMatmulActivations("BF16", &parsed));
  EXPECT_STREQ(MatmulActivationsName(parsed), "bf16");
  auto plain = CreateBackend(BackendOptions{"cpu", 1, 0});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->matmul_activations(), MatmulActivations::kF32);
}

// int8 activations: the CPU backend runs them on any CPU with AVX2 (VNNI's
// kernel or AVX2's), unless EXPERTD_CPU_ISA caps it to scalar; CUDA refuses
// them, naming the mode.
TEST(BackendFactoryTest, Int8ActivationsNeedTheCpuBackendWithAvx2) {
  BackendOptions o{"cpu", 1, 0};
  o.matmul_activations = MatmulActivations::kInt8;
  auto cpu = CreateBackend(o);
  if (cpu::CpuSupportsInt8Activations()) {
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_EQ((*cpu)->matmul_activations(), MatmulActivations::kInt8);
  } else {
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kFailedPrecondition) << cpu.status();
    EXPECT_NE(cpu.status().message().find("AVX2"), std::string::npos) << cpu.status();
  }
  o.name = "cuda";
  auto cuda = CreateBackend(o);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kInvalidArgument) << cuda.status();
  EXPECT_NE(cuda.status().message().find("int8 matmul activations"), std::string::npos)
      << cuda.status();
  MatmulActivations parsed = MatmulActivations::kF32;
  EXPECT_TRUE(ParseMatmulActivations("int8", &parsed));
  EXPECT_EQ(parsed, MatmulActivations::kInt8);
  EXPECT_STREQ(MatmulActivationsName(parsed), "int8");
}

#ifdef EXPERTD_WITH_CUDA
// Which outcome is right is decided by an independent probe of the CUDA
// runtime, so neither a broken backend on a GPU machine nor a backend that
// claims a device on a machine without one can pass.
TEST(BackendFactoryTest, CudaRunsExactlyWhenADeviceIsPresent) {
  const cuda_test::GpuProbe probe = cuda_test::ProbeGpu();
  auto b = CreateBackend(BackendOptions{"cuda", 1, 64 << 20});
  if (probe.has_device) {
    ASSERT_TRUE(b.ok()) << b.status() << " (probe: " << probe.detail << ")";
    EXPECT_EQ((*b)->name(), "cuda");
    EXPECT_FALSE((*b)->host_memory_is_device_memory());
    EXPECT_EQ((*b)->memory_stats().device_bytes_limit, 64u << 20);
  } else {
    ASSERT_FALSE(b.ok()) << "no device (" << probe.detail << ") yet the cuda backend was created";
    // A clear Unavailable naming the reason, never Unimplemented.
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
    EXPECT_NE(b.status().message().find("CUDA device"), std::string::npos) << b.status();
  }
}
#else
TEST(BackendFactoryTest, CudaWithoutTheCudaBuildIsAClearUnimplemented) {
  auto b = CreateBackend(BackendOptions{"cuda", 1, 0});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(b.status().message().find("this build has no CUDA backend"), std::string::npos)
      << b.status();
}
#endif

TEST(BackendFactoryTest, CpuAsyncCopyIsACompletedEventAndWaitOnDeviceIsANoOp) {
  auto b = CreateBackend(BackendOptions{"cpu", 1, 0});
  ASSERT_TRUE(b.ok()) << b.status();
  auto dst = (*b)->Allocate(64, MemoryKind::kDevice);
  auto src = (*b)->Allocate(64, MemoryKind::kHostPinned);
  ASSERT_TRUE(dst.ok() && src.ok());
  for (int i = 0; i < 16; ++i) src->as<float>()[i] = static_cast<float>(i) + 0.5f;
  auto event = (*b)->CopyToDeviceAsync(dst->data(), src->data(), 64);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE((*event)->Done());
  EXPECT_TRUE((*b)->WaitOnDevice(event->get()).ok());
  EXPECT_TRUE((*event)->Wait().ok());
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), 64), 0);
}

// --backend=auto: CUDA when a GPU can be used, the CPU otherwise.
TEST(BackendFactoryTest, AutoPicksCudaOnlyWhenAGpuIsUsable) {
  EXPECT_EQ(ResolveBackendName("cpu"), "cpu");
  EXPECT_EQ(ResolveBackendName("cuda"), "cuda");
#ifdef EXPERTD_WITH_CUDA
  const bool gpu = cuda_test::ProbeGpu().has_device;  // an independent probe of the runtime
#else
  const bool gpu = false;
#endif
  EXPECT_EQ(ResolveBackendName("auto"), gpu ? "cuda" : "cpu");
  auto b = CreateBackend(BackendOptions{"auto", 1, 64 << 20});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), gpu ? "cuda" : "cpu");
}

}  // namespace
}  // namespace expertd::engine
