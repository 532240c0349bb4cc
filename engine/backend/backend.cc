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

void DeviceBuffer::Reset() {
  if (data_ != nullptr && owner_ != nullptr) owner_->Free(data_, size_, kind_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace expertd::engine
