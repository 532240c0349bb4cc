#include "engine/backend/cuda/cuda_test_util.h"

#include <algorithm>
#include <memory>

namespace expertd::engine::cuda_test {
namespace {

struct Shared {
  std::unique_ptr<CudaBackend> backend;
  std::string reason;
};

Shared& Get() {
  static Shared* shared = [] {
    auto* s = new Shared;
    CudaBackendOptions o;
    o.device_memory_limit = 2ull << 30;
    auto b = CudaBackend::Create(o);
    if (b.ok()) {
      s->backend = std::move(*b);
    } else {
      s->reason = b.status().ToString();
    }
    return s;
  }();
  return *shared;
}

}  // namespace

CudaBackend* SharedBackend() { return Get().backend.get(); }
const std::string& SkipReason() { return Get().reason; }

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
