// AlignedBuffer: an owned, zero-initialised block of host memory aligned for
// direct I/O (4 KiB by default). Move-only.
#ifndef EXPERTD_ENGINE_EXPERTS_PACK_ALIGNED_BUFFER_H_
#define EXPERTD_ENGINE_EXPERTS_PACK_ALIGNED_BUFFER_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace expertd::engine {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Throws nothing: on allocation failure data() is null (check empty()).
  explicit AlignedBuffer(uint64_t size, uint64_t alignment = 4096) : size_(size) {
    void* p = nullptr;
    if (size > 0 && posix_memalign(&p, alignment, size) == 0) {
      std::memset(p, 0, size);
      data_.reset(static_cast<uint8_t*>(p));
    } else {
      size_ = 0;
    }
  }
  uint8_t* data() const { return data_.get(); }
  uint64_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  uint64_t size_ = 0;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_PACK_ALIGNED_BUFFER_H_
