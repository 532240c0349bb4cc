#include "engine/train/device_memory.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace expertd::train {

namespace {

absl::Status DoesNotFit(int64_t bytes, const std::string& what, int64_t in_use, int64_t limit) {
  return absl::ResourceExhaustedError(absl::StrCat(
      "device memory: ", what, " needs ", bytes, " bytes; ", in_use, " of ", limit,
      " bytes are in use (--device_memory_bytes)"));
}

}  // namespace

absl::Status DeviceMemoryTracker::Reserve(int64_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (limit_ > 0 && in_use_ + bytes > limit_) return DoesNotFit(bytes, what, in_use_, limit_);
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return absl::OkStatus();
}

absl::Status DeviceMemoryTracker::ReserveWaiting(int64_t bytes, int64_t floor_bytes,
                                                 const std::string& what) {
  std::unique_lock<std::mutex> lock(mu_);
  if (limit_ > 0 && floor_bytes + bytes > limit_) return DoesNotFit(bytes, what, in_use_, limit_);
  released_.wait(lock, [&] { return limit_ <= 0 || in_use_ + bytes <= limit_; });
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return absl::OkStatus();
}

void DeviceMemoryTracker::Release(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= bytes;
  }
  released_.notify_all();
}

int64_t DeviceMemoryTracker::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

int64_t DeviceMemoryTracker::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

int64_t DeviceMemoryTracker::available() const {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_ > 0 ? limit_ - in_use_ : std::numeric_limits<int64_t>::max() / 4;
}

void DeviceMemoryTracker::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = in_use_;
}

DeviceReservation& DeviceReservation::operator=(DeviceReservation&& o) noexcept {
  if (this == &o) return *this;
  Reset();
  tracker_ = o.tracker_;
  bytes_ = o.bytes_;
  o.tracker_ = nullptr;
  o.bytes_ = 0;
  return *this;
}

absl::Status DeviceReservation::Acquire(DeviceMemoryTracker* tracker, int64_t bytes,
                                        const std::string& what) {
  Reset();
  if (tracker == nullptr) return absl::OkStatus();
  absl::Status st = tracker->Reserve(bytes, what);
  if (!st.ok()) return st;
  tracker_ = tracker;
  bytes_ = bytes;
  return absl::OkStatus();
}

void DeviceReservation::Reset() {
  if (tracker_ != nullptr) tracker_->Release(bytes_);
  tracker_ = nullptr;
  bytes_ = 0;
}

}  // namespace expertd::train
