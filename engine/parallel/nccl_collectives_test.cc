// Runs only where CUDA devices exist; elsewhere every test skips (a device
// whose runtime fails counts as present and fails the test). With one device
// it checks a world of one; with several, one rank per device. Every
// operation of the Collectives interface is checked for its exact result.
#include "engine/parallel/nccl_collectives.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "engine/backend/cuda/cuda_test_util.h"
#include "gtest/gtest.h"

namespace expertd::engine::parallel {
namespace {

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// A device buffer of `bytes`, filled from / read back to host vectors.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() { return ptr_; }
  template <typename T>
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size() * sizeof(T), bytes_);
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <typename T>
  std::vector<T> Download() const {
    std::vector<T> host(bytes_ / sizeof(T));
    EXPECT_EQ(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t bytes_;
  void* ptr_ = nullptr;
};

// Runs body(rank, collectives) on one thread per local device, each thread
// bound to its device, and returns each rank's status.
std::vector<absl::Status> OnEveryRank(std::vector<std::unique_ptr<Collectives>>& ranks,
                                      const std::function<absl::Status(int, Collectives&)>& body) {
  std::vector<absl::Status> status(ranks.size());
  std::vector<std::thread> threads;
  for (int d = 0; d < static_cast<int>(ranks.size()); ++d) {
    threads.emplace_back([&, d] {
      cudaSetDevice(d);
      status[d] = body(d, *ranks[d]);
    });
  }
  for (std::thread& t : threads) t.join();
  return status;
}

class NcclCollectivesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_test::ProbeGpu().has_device) GTEST_SKIP() << "no CUDA device";
    devices_ = DeviceCount();
    ASSERT_GT(devices_, 0) << "the probe saw a device, the runtime counts none";
    RendezvousSpec spec;
    spec.devices_per_node = devices_;
    absl::StatusOr<std::vector<std::unique_ptr<Collectives>>> ranks = CreateNcclCollectives(spec);
    ASSERT_TRUE(ranks.ok()) << ranks.status();
    ranks_ = std::move(*ranks);
  }

  int devices_ = 0;
  std::vector<std::unique_ptr<Collectives>> ranks_;
};

TEST_F(NcclCollectivesTest, AllReduceSumsFloatsAndInt64s) {
  const int n = 1000;
  std::vector<std::vector<float>> floats(devices_);
  std::vector<std::vector<int64_t>> ints(devices_);
  auto status = OnEveryRank(ranks_, [&](int r, Collectives& c) -> absl::Status {
    DeviceBuffer f(n * sizeof(float)), i(n * sizeof(int64_t));
    f.Upload(std::vector<float>(n, static_cast<float>(r + 1)));
    std::vector<int64_t> in(n);
    for (int k = 0; k < n; ++k) in[k] = (int64_t{1} << 40) * (r + 1) + k;
    i.Upload(in);
    absl::Status s = c.AllReduceSum(static_cast<float*>(f.get()), n);
    if (s.ok()) s = c.AllReduceSum(i.get(), n, ReduceType::kInt64);
    if (s.ok()) s = c.Barrier();
    floats[r] = f.Download<float>();
    ints[r] = i.Download<int64_t>();
    return s;
  });
  const int64_t ranks_sum = int64_t{devices_} * (devices_ + 1) / 2;
  for (int r = 0; r < devices_; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(floats[r][0], static_cast<float>(ranks_sum));
    EXPECT_EQ(floats[r][n - 1], static_cast<float>(ranks_sum));
    for (int k : {0, 1, n - 1}) {
      EXPECT_EQ(ints[r][k], (int64_t{1} << 40) * ranks_sum + int64_t{devices_} * k) << k;
    }
  }
}

TEST_F(NcclCollectivesTest, AllGatherPlacesEachRanksBlockAtItsRank) {
  const int n = 333;  // bytes per rank: odd on purpose
  std::vector<std::vector<uint8_t>> got(devices_);
  auto status = OnEveryRank(ranks_, [&](int r, Collectives& c) -> absl::Status {
    DeviceBuffer send(n), recv(n * devices_);
    std::vector<uint8_t> mine(n);
    for (int k = 0; k < n; ++k) mine[k] = static_cast<uint8_t>(r * 31 + k);
    send.Upload(mine);
    absl::Status s = c.AllGather(send.get(), recv.get(), n);
    got[r] = recv.Download<uint8_t>();
    return s;
  });
  for (int r = 0; r < devices_; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    for (int src = 0; src < devices_; ++src) {
      for (int k = 0; k < n; ++k) {
        ASSERT_EQ(got[r][src * n + k], static_cast<uint8_t>(src * 31 + k)) << r << " " << src;
      }
    }
  }
}

// Rank s sends (s + d + 1) int32 values, all equal to s * 1000 + d, to rank d.
TEST_F(NcclCollectivesTest, AllToAllVDeliversUnequalBlocksInRankOrder) {
  auto count = [](int s, int d) { return s + d + 1; };
  std::vector<std::vector<int32_t>> got(devices_);
  auto status = OnEveryRank(ranks_, [&](int r, Collectives& c) -> absl::Status {
    std::vector<int32_t> send_values;
    std::vector<int64_t> send_bytes(devices_), recv_bytes(devices_);
    int64_t recv_total = 0;
    for (int d = 0; d < devices_; ++d) {
      send_values.insert(send_values.end(), count(r, d), r * 1000 + d);
      send_bytes[d] = count(r, d) * sizeof(int32_t);
      recv_bytes[d] = count(d, r) * sizeof(int32_t);
      recv_total += recv_bytes[d];
    }
    DeviceBuffer send(send_values.size() * sizeof(int32_t)), recv(recv_total);
    send.Upload(send_values);
    absl::Status s = c.AllToAllV(send.get(), send_bytes.data(), recv.get(), recv_bytes.data());
    got[r] = recv.Download<int32_t>();
    return s;
  });
  for (int r = 0; r < devices_; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    std::vector<int32_t> expected;
    for (int s = 0; s < devices_; ++s) expected.insert(expected.end(), count(s, r), s * 1000 + r);
    EXPECT_EQ(got[r], expected) << "rank " << r;
  }
}

TEST_F(NcclCollectivesTest, AllToAllSendsBlockDToRankD) {
  const int per_rank = 16;  // int32 values per block
  std::vector<std::vector<int32_t>> got(devices_);
  auto status = OnEveryRank(ranks_, [&](int r, Collectives& c) -> absl::Status {
    std::vector<int32_t> values(per_rank * devices_);
    for (int d = 0; d < devices_; ++d) {
      for (int k = 0; k < per_rank; ++k) values[d * per_rank + k] = r * 10000 + d * 100 + k;
    }
    DeviceBuffer send(values.size() * sizeof(int32_t)), recv(values.size() * sizeof(int32_t));
    send.Upload(values);
    absl::Status s = c.AllToAll(send.get(), recv.get(), per_rank * sizeof(int32_t));
    got[r] = recv.Download<int32_t>();
    return s;
  });
  for (int r = 0; r < devices_; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    for (int s = 0; s < devices_; ++s) {
      for (int k = 0; k < per_rank; ++k) {
        ASSERT_EQ(got[r][s * per_rank + k], s * 10000 + r * 100 + k) << r << " " << s;
      }
    }
  }
}

TEST_F(NcclCollectivesTest, BroadcastCopiesTheRootsBufferEverywhere) {
  const int n = 257;
  const int root = devices_ - 1;
  std::vector<std::vector<float>> got(devices_);
  auto status = OnEveryRank(ranks_, [&](int r, Collectives& c) -> absl::Status {
    DeviceBuffer buf(n * sizeof(float));
    std::vector<float> values(n);
    for (int k = 0; k < n; ++k) values[k] = r == root ? 0.5f * k : -1.0f;
    buf.Upload(values);
    absl::Status s = c.Broadcast(buf.get(), n * sizeof(float), root);
    got[r] = buf.Download<float>();
    return s;
  });
  for (int r = 0; r < devices_; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    for (int k = 0; k < n; ++k) ASSERT_EQ(got[r][k], 0.5f * k) << r << " " << k;
  }
}

TEST(NcclCollectives, TooFewDevicesIsFailedPrecondition) {
  if (!cuda_test::ProbeGpu().has_device) GTEST_SKIP() << "no CUDA device";
  RendezvousSpec spec;
  spec.devices_per_node = DeviceCount() + 1;
  EXPECT_EQ(CreateNcclCollectives(spec).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace expertd::engine::parallel
