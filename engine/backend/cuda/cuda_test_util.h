// Helpers for the CUDA backend's tests (test-only): a probe that tells "no
// GPU on this machine" from "a GPU whose backend fails", one shared backend
// per test binary, device mirrors of host arrays, and the comparison metrics.
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_CUDA_TEST_UTIL_H_
#define EXPERTD_ENGINE_BACKEND_CUDA_CUDA_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/backend/cpu/reference_ops.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace expertd::engine::cuda_test {

// Whether the machine has a CUDA device, asked of the CUDA runtime directly
// (not through CudaBackend, whose failures are what the tests look for).
struct GpuProbe {
  // False only when there is no device: the runtime says so, or it reports a
  // missing/stub driver and no NVIDIA kernel driver is loaded
  // (/proc/driver/nvidia absent). Any other runtime error counts as a device
  // that must work, so a broken driver fails the tests instead of skipping.
  bool has_device = false;
  std::string detail;  // what the runtime said
};
GpuProbe ProbeGpu();

// Created on first use with a 2 GiB arena; null when there is no device or
// when CudaBackend::Create failed (BackendError() says why).
CudaBackend* SharedBackend();
// Why SharedBackend() is null ("" when it is not).
const std::string& BackendError();
// ProbeGpu().has_device, cached with the shared backend.
bool HasGpu();

// In a TEST body: skip on a machine without a CUDA device; fail when there is
// one but the shared backend could not be created.
#define EXPERTD_REQUIRE_GPU()                                                       \
  do {                                                                              \
    if (::expertd::engine::cuda_test::SharedBackend() == nullptr) {                 \
      if (!::expertd::engine::cuda_test::HasGpu()) {                                \
        GTEST_SKIP() << "no GPU: " << ::expertd::engine::cuda_test::BackendError(); \
      }                                                                             \
      FAIL() << "a CUDA device is present but CudaBackend::Create failed: "         \
             << ::expertd::engine::cuda_test::BackendError();                       \
    }                                                                               \
  } while (0)

// A device copy of a host array. Fails the test (ADD_FAILURE) on errors.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : n_(host.size()) {
    auto b = SharedBackend()->Allocate(bytes(), MemoryKind::kDevice);
    if (!b.ok()) {
      ADD_FAILURE() << b.status();
      return;
    }
    buf_ = std::move(*b);
    absl::Status s = SharedBackend()->CopyToDevice(buf_.data(), host.data(), bytes());
    if (!s.ok()) ADD_FAILURE() << s;
  }
  // n copies of `fill` (a poison value for outputs: NaN never passes).
  DeviceArray(size_t n, T fill) : DeviceArray(std::vector<T>(n, fill)) {}

  T* get() const { return buf_.as<T>(); }
  size_t size() const { return n_; }
  std::vector<T> ToHost() const {
    std::vector<T> out(n_);
    absl::Status s = SharedBackend()->CopyToHost(out.data(), buf_.data(), bytes());
    if (!s.ok()) ADD_FAILURE() << s;
    return out;
  }

 private:
  uint64_t bytes() const { return std::max<uint64_t>(1, n_ * sizeof(T)); }
  size_t n_ = 0;
  DeviceBuffer buf_;
};

// A reference::TestWeight uploaded to the device (kept alive by the object).
class DeviceWeight {
 public:
  explicit DeviceWeight(const reference::TestWeight& w);
  WeightRef ref() const { return ref_; }

 private:
  DeviceBuffer buf_;
  WeightRef ref_;
};

// max |got - want| / max |want|; +inf when a value is NaN or sizes differ.
double RelError(const std::vector<float>& got, const std::vector<float>& want);
bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b);
// Fails the test if the device reported an error (runs Synchronize).
void ExpectNoDeviceError();

}  // namespace expertd::engine::cuda_test

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_CUDA_TEST_UTIL_H_
