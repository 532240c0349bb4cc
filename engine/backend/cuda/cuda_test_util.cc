#include "engine/backend/cuda/cuda_test_util.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"

namespace expertd::engine::cuda_test {
namespace {

struct Shared {
  GpuProbe probe;
  std::unique_ptr<CudaBackend> backend;
  std::string error;
};

Shared& Get() {
  static Shared* shared = [] {
    auto* s = new Shared;
    s->probe = ProbeGpu();
    CudaBackendOptions o;
    o.device_memory_limit = 2ull << 30;
    auto b = CudaBackend::Create(o);
    if (b.ok()) {
      s->backend = std::move(*b);
    } else {
      s->error = absl::StrCat(b.status().ToString(), " [probe: ", s->probe.detail, "]");
    }
    return s;
  }();
  return *shared;
}

}  // namespace

GpuProbe ProbeGpu() {
  GpuProbe p;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess) {
    p.has_device = count > 0;
    p.detail = absl::StrCat(count, " CUDA device(s)");
    return p;
  }
  cudaGetLastError();  // do not leave the error behind
  p.detail = absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  // The runtime reports a machine without the NVIDIA driver as an old or stub
  // driver; with the kernel driver loaded, the same error is a broken install.
  const bool driver_loaded = access("/proc/driver/nvidia/version", F_OK) == 0;
  const bool no_driver =
      !driver_loaded && (e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary);
  p.has_device = !(e == cudaErrorNoDevice || no_driver);
  if (no_driver) absl::StrAppend(&p.detail, "; no NVIDIA kernel driver loaded");
  return p;
}

CudaBackend* SharedBackend() { return Get().backend.get(); }
const std::string& BackendError() { return Get().error; }
bool HasGpu() { return Get().probe.has_device; }

DeviceWeight::DeviceWeight(const reference::TestWeight& w) {
  ref_ = w.ref();
  auto b = SharedBackend()->Allocate(std::max<uint64_t>(1, ref_.nbytes()), MemoryKind::kDevice);
  if (!b.ok()) {
    ADD_FAILURE() << b.status();
    return;
  }
  buf_ = std::move(*b);
  absl::Status s = SharedBackend()->CopyToDevice(buf_.data(), ref_.data, ref_.nbytes());
  if (!s.ok()) ADD_FAILURE() << s;
  ref_.data = buf_.data();
}

double RelError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    num = std::max(num, std::abs(static_cast<double>(got[i]) - want[i]));
    den = std::max(den, std::abs(static_cast<double>(want[i])));
  }
  return den == 0 ? num : num / den;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectNoDeviceError() {
  absl::Status s = SharedBackend()->Synchronize();
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace expertd::engine::cuda_test
