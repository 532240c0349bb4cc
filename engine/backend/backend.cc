#include "engine/backend/backend.h"

#include <utility>

namespace expertd::engine {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    kind_ = other.kind_;
  }
  return *this;
}

namespace {

// The event of work that finished before it was returned.
class CompletedEvent final : public BackendEvent {
 public:
  bool Done() override { return true; }
  absl::Status Wait() override { return absl::OkStatus(); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BackendEvent>> Backend::CopyToDeviceAsync(void* device_dst,
                                                                         const void* host_src,
                                                                         uint64_t bytes) {
  absl::Status s = CopyToDevice(device_dst, host_src, bytes);
  if (!s.ok()) return s;
  return std::unique_ptr<BackendEvent>(new CompletedEvent());
}

absl::Status Backend::WaitOnDevice(BackendEvent* event) { return event->Wait(); }

void Backend::GroupedMatmul(const GroupedMatmulParams& p) {
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t r0 = p.row_offset[g], rows = p.row_offset[g + 1] - r0;
    if (rows <= 0) continue;
    MatmulParams m;
    m.x = p.x_rows == nullptr ? p.x + r0 * p.x_stride : p.x;
    m.x_stride = p.x_stride;
    m.w = p.w[g];
    m.y = p.y_rows == nullptr ? p.y + r0 * p.y_stride : p.y;
    m.y_stride = p.y_stride;
    m.m = rows;
    m.accumulate = p.accumulate;
    m.activations = p.activations;
    if (p.x_rows != nullptr) m.x_rows = p.x_rows + r0;
    if (p.y_rows != nullptr) m.y_rows = p.y_rows + r0;
    Matmul(m);
  }
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr && owner_ != nullptr) owner_->Free(data_, size_, kind_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

const char* MatmulActivationsName(MatmulActivations activations) {
  switch (activations) {
    case MatmulActivations::kF32:
      return "fp32";
    case MatmulActivations::kBF16:
      return "bf16";
    case MatmulActivations::kInt8:
      return "int8";
  }
  return "fp32";
}

bool ParseMatmulActivations(const std::string& text, MatmulActivations* out) {
  if (text == "fp32") {
    *out = MatmulActivations::kF32;
  } else if (text == "bf16") {
    *out = MatmulActivations::kBF16;
  } else if (text == "int8") {
    *out = MatmulActivations::kInt8;
  } else {
    return false;
  }
  return true;
}

}  // namespace expertd::engine
