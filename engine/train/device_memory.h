// DeviceMemoryTracker: the training engine's model of a device's memory. The
// CPU backend computes in host RAM, so "on the device" is an accounting
// property: every buffer a step would hold on an accelerator (non-expert
// weights, experts in flight, activations saved for backward, gradients,
// optimizer state) reserves its bytes here first, and a reservation past the
// limit fails with ResourceExhausted naming what did not fit. A small
// `--device_memory_bytes` is therefore a real constraint on every machine.
//
// Thread safety: all methods may be called concurrently (the expert upload
// thread reserves while the compute thread releases).
#ifndef EXPERTD_ENGINE_TRAIN_DEVICE_MEMORY_H_
#define EXPERTD_ENGINE_TRAIN_DEVICE_MEMORY_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace expertd::train {

class DeviceMemoryTracker {
 public:
  // limit_bytes <= 0: unlimited (bytes are still counted).
  explicit DeviceMemoryTracker(int64_t limit_bytes) : limit_(limit_bytes) {}

  // Reserves `bytes` for `what`; ResourceExhausted (naming `what`, the bytes,
  // what is in use and the limit) when it does not fit. Nothing is reserved
  // on failure.
  absl::Status Reserve(int64_t bytes, const std::string& what);
  // Like Reserve, but waits while others' releases could still make room;
  // gives up with ResourceExhausted when `bytes` exceeds what the device can
  // ever hold beyond `floor_bytes` (memory no release will return).
  absl::Status ReserveWaiting(int64_t bytes, int64_t floor_bytes, const std::string& what);
  void Release(int64_t bytes);

  int64_t limit() const { return limit_; }
  int64_t in_use() const;
  int64_t peak() const;
  // Free bytes now (a large number when unlimited).
  int64_t available() const;
  // Starts a new high-water mark at the current use.
  void ResetPeak();

 private:
  const int64_t limit_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
};

// RAII: holds a reservation until destroyed or Reset.
class DeviceReservation {
 public:
  DeviceReservation() = default;
  DeviceReservation(DeviceReservation&& o) noexcept { *this = std::move(o); }
  DeviceReservation& operator=(DeviceReservation&& o) noexcept;
  ~DeviceReservation() { Reset(); }

  // Reserves (after releasing what this held). A null tracker counts nothing.
  absl::Status Acquire(DeviceMemoryTracker* tracker, int64_t bytes, const std::string& what);
  void Reset();
  int64_t bytes() const { return bytes_; }

 private:
  DeviceMemoryTracker* tracker_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_DEVICE_MEMORY_H_
