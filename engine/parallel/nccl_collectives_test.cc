// Runs only where CUDA devices exist; elsewhere every test skips. With one
// device it checks a world of one; with several, one rank per device.
#include "engine/parallel/nccl_collectives.h"

#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace expertd::engine::parallel {
namespace {

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

TEST(NcclCollectives, AllReduceAndBroadcastOverEveryLocalDevice) {
  const int devices = DeviceCount();
  if (devices == 0) GTEST_SKIP() << "no CUDA device";
  RendezvousSpec spec;
  spec.devices_per_node = devices;
  absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> ranks = CreateNcclCollectives(spec);
  ASSERT_TRUE(ranks.ok()) << ranks.status();
  const int n = 1000;
  std::vector<std::vector<float>> host(devices, std::vector<float>(n));
  std::vector<absl::Status> status(devices);
  std::vector<std::thread> threads;
  for (int d = 0; d < devices; ++d) {
    threads.emplace_back([&, d] {
      cudaSetDevice(d);
      std::vector<float> in(n, static_cast<float>(d + 1));
      float* buf = nullptr;
      cudaMalloc(&buf, n * sizeof(float));
      cudaMemcpy(buf, in.data(), n * sizeof(float), cudaMemcpyHostToDevice);
      status[d] = (*ranks)[d]->AllReduceSum(buf, n);
      if (status[d].ok()) status[d] = (*ranks)[d]->Barrier();
      cudaMemcpy(host[d].data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost);
      cudaFree(buf);
    });
  }
  for (std::thread& t : threads) t.join();
  const float expected = devices * (devices + 1) / 2.0f;
  for (int d = 0; d < devices; ++d) {
    ASSERT_TRUE(status[d].ok()) << status[d];
    EXPECT_EQ(host[d][0], expected);
    EXPECT_EQ(host[d][n - 1], expected);
  }
}

TEST(NcclCollectives, TooFewDevicesIsFailedPrecondition) {
  const int devices = DeviceCount();
  if (devices == 0) GTEST_SKIP() << "no CUDA device";
  RendezvousSpec spec;
  spec.devices_per_node = devices + 1;
  EXPECT_EQ(CreateNcclCollectives(spec).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace expertd::engine::parallel
