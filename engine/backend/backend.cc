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

void DeviceBuffer::Reset() {
  if (data_ != nullptr && owner_ != nullptr) owner_->Free(data_, size_, kind_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace expertd::engine
