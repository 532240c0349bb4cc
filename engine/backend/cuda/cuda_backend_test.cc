// CudaBackend's memory, copies, events and error reporting. Skips on
// machines without a GPU (except the availability check itself); fails when
// a GPU is present but the backend does not come up.
#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "engine/backend/cuda/cuda_test_util.h"
#include "gtest/gtest.h"

namespace expertd::engine {
namespace {

// CudaDeviceAvailable agrees with an independent probe of the runtime: with a
// device, Create must work; without one, both say Unavailable.
TEST(CudaBackendTest, AvailabilityIsOkOrAClearUnavailable) {
  const cuda_test::GpuProbe probe = cuda_test::ProbeGpu();
  absl::Status s = CudaDeviceAvailable();
  CudaBackendOptions o;
  o.device_memory_limit = 64ull << 20;
  o.gemm_workspace_bytes = 1 << 20;
  o.gemm_scratch_bytes = 1 << 20;
  auto b = CudaBackend::Create(o);
  if (probe.has_device) {
    ASSERT_TRUE(s.ok()) << s << " (probe: " << probe.detail << ")";
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->name(), "cuda");
    EXPECT_EQ((*b)->memory_stats().device_bytes_limit, 64ull << 20);
    EXPECT_TRUE((*b)->Synchronize().ok());
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  }
  // A device index that no machine has is a clear Unavailable everywhere.
  EXPECT_EQ(CudaDeviceAvailable(1 << 20).code(), absl::StatusCode::kUnavailable);
  o.device = 1 << 20;
  EXPECT_EQ(CudaBackend::Create(o).status().code(), absl::StatusCode::kUnavailable);
}

TEST(CudaBackendTest, ArenaIsAHardBudgetAndFreedMemoryIsReused) {
  EXPERTD_REQUIRE_GPU();
  CudaBackendOptions o;
  o.device_memory_limit = 256ull << 20;
  o.gemm_workspace_bytes = 1 << 20;
  o.gemm_scratch_bytes = 1 << 20;
  auto b = CudaBackend::Create(o);
  ASSERT_TRUE(b.ok()) << b.status();
  CudaBackend& be = **b;
  EXPECT_EQ(be.memory_stats().device_bytes_limit, 256ull << 20);
  const uint64_t base = be.memory_stats().device_bytes_in_use;  // the GEMM buffers
  EXPECT_EQ(base, 2ull << 20);
  auto big = be.Allocate(200ull << 20, MemoryKind::kDevice);
  ASSERT_TRUE(big.ok()) << big.status();
  auto too_much = be.Allocate(100ull << 20, MemoryKind::kDevice);
  EXPECT_EQ(too_much.status().code(), absl::StatusCode::kResourceExhausted);
  const void* address = big->data();
  big->Reset();
  auto again =
      be.Allocate(200ull << 20, MemoryKind::kDevice);  // waits for the free's event if needed
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->data(), address);
  EXPECT_GE(be.memory_stats().device_bytes_peak, base + (200ull << 20));
  auto pinned = be.Allocate(1 << 20, MemoryKind::kHostPinned);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(be.memory_stats().host_pinned_bytes_in_use, 1u << 20);
}

TEST(CudaBackendTest, CopiesRoundTripFromPageableAndPinnedMemory) {
  EXPERTD_REQUIRE_GPU();
  CudaBackend* be = cuda_test::SharedBackend();
  const size_t n = (8 << 20) + 3;
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.0f);
  auto dev = be->Allocate(n * 4, MemoryKind::kDevice);
  auto pinned = be->Allocate(n * 4, MemoryKind::kHostPinned);
  ASSERT_TRUE(dev.ok() && pinned.ok());
  ASSERT_TRUE(be->CopyToDevice(dev->data(), host.data(), n * 4).ok());
  std::vector<float> back(n, -1.0f);
  ASSERT_TRUE(be->CopyToHost(back.data(), dev->data(), n * 4).ok());
  EXPECT_EQ(back, host);
  std::memcpy(pinned->data(), host.data(), n * 4);
  for (size_t i = 0; i < n; ++i) pinned->as<float>()[i] += 1.0f;
  const uint64_t copied = be->copy_stats().h2d_bytes;
  ASSERT_TRUE(be->CopyToDevice(dev->data(), pinned->data(), n * 4).ok());
  EXPECT_EQ(be->copy_stats().h2d_bytes, copied + n * 4);
  ASSERT_TRUE(be->CopyToHost(back.data(), dev->data(), n * 4).ok());
  EXPECT_EQ(back[n - 1], host[n - 1] + 1.0f);
}

// y = x + 1 (AddRows) right after an asynchronous copy into x: with
// WaitOnDevice the op sees the copied values, never the old ones. The copy
// is large (256 MiB over PCIe: milliseconds), so a missing wait would show.
TEST(CudaBackendTest, WaitOnDeviceOrdersOpsAfterAnAsyncCopy) {
  EXPERTD_REQUIRE_GPU();
  CudaBackend* be = cuda_test::SharedBackend();
  const int64_t dim = 64 << 20;  // floats
  auto x = be->Allocate(dim * 4, MemoryKind::kDevice);
  auto y = be->Allocate(dim * 4, MemoryKind::kDevice);
  auto src = be->Allocate(dim * 4, MemoryKind::kHostPinned);
  ASSERT_TRUE(x.ok() && y.ok() && src.ok());
  std::vector<float> zeros(dim, 0.0f);
  ASSERT_TRUE(be->CopyToDevice(x->data(), zeros.data(), dim * 4).ok());
  ASSERT_TRUE(be->CopyToDevice(y->data(), zeros.data(), dim * 4).ok());
  for (int64_t i = 0; i < dim; ++i) src->as<float>()[i] = 2.0f;
  auto event = be->CopyToDeviceAsync(x->data(), src->data(), dim * 4);
  ASSERT_TRUE(event.ok()) << event.status();
  ASSERT_TRUE(be->WaitOnDevice(event->get()).ok());
  be->AddRows(AddRowsParams{y->as<float>(), dim, x->as<float>(), dim, nullptr, 1,
                            RowScale::kIdentity, 1, dim});
  std::vector<float> out(dim);
  ASSERT_TRUE(be->CopyToHost(out.data(), y->data(), dim * 4).ok());
  EXPECT_TRUE((*event)->Done());
  EXPECT_EQ(std::count(out.begin(), out.end(), 2.0f), dim);
}

// The other direction: a copy issued (from another thread, as the expert
// store's transfer workers do) after an op that reads its destination must
// not overwrite it under the op: the op sees the old values.
TEST(CudaBackendTest, CopyToDeviceWaitsForOpsAlreadyEnqueued) {
  EXPERTD_REQUIRE_GPU();
  CudaBackend* be = cuda_test::SharedBackend();
  const int64_t rows = 64, dim = 1 << 20;  // 256 MiB gathered 4 times over
  auto x = be->Allocate(rows * dim * 4, MemoryKind::kDevice);
  auto y = be->Allocate(4 * rows * dim * 4, MemoryKind::kDevice);
  auto idx = be->Allocate(4 * rows * 4, MemoryKind::kDevice);
  auto src = be->Allocate(rows * dim * 4, MemoryKind::kHostPinned);
  ASSERT_TRUE(x.ok() && y.ok() && idx.ok() && src.ok());
  std::vector<float> ones(rows * dim, 1.0f);
  ASSERT_TRUE(be->CopyToDevice(x->data(), ones.data(), ones.size() * 4).ok());
  std::vector<int32_t> index(4 * rows);
  for (size_t i = 0; i < index.size(); ++i) index[i] = static_cast<int32_t>(i % rows);
  ASSERT_TRUE(be->CopyToDevice(idx->data(), index.data(), index.size() * 4).ok());
  for (int64_t i = 0; i < rows * dim; ++i) src->as<float>()[i] = 5.0f;
  be->GatherRows(
      GatherRowsParams{x->as<float>(), dim, idx->as<int32_t>(), y->as<float>(), 4 * rows, dim});
  std::thread other(
      [&] { EXPECT_TRUE(be->CopyToDevice(x->data(), src->data(), rows * dim * 4).ok()); });
  other.join();
  std::vector<float> out(4 * rows * dim);
  ASSERT_TRUE(be->CopyToHost(out.data(), y->data(), out.size() * 4).ok());
  EXPECT_EQ(std::count(out.begin(), out.end(), 1.0f), static_cast<int64_t>(out.size()));
}

TEST(CudaBackendTest, AnOpOutsideItsLimitsIsReportedAtTheNextSynchronize) {
  EXPERTD_REQUIRE_GPU();
  CudaBackend* be = cuda_test::SharedBackend();
  ASSERT_TRUE(be->Synchronize().ok());
  SoftmaxTopKParams p;
  p.rows = 1;
  p.num_experts = 1000;  // beyond the kernel's 512
  p.top_k = 2;
  be->SoftmaxTopK(p);
  absl::Status s = be->Synchronize();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("SoftmaxTopK"), std::string::npos) << s;
  EXPECT_TRUE(be->Synchronize().ok());  // taken
}

}  // namespace
}  // namespace expertd::engine
