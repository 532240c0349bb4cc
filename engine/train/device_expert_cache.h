// DeviceExpertCache: one training device's pinned experts. ES-MoE keeps the
// hottest quarter of a layer's experts on the device they ran on
// (expert_placement.h), so the next step does not bring them through the
// device's two upload slots. Each entry holds a copy of an expert's weights
// and room for its gradient, reserved on the device's DeviceMemoryTracker for
// as long as it is cached, between steps too.
//
// Staleness: AdamW changes a trained expert's weights on the host after every
// step, so after MarkStale() (the trainer calls it once a step's updates are
// done) a cached copy is uploaded again before its next use: a pinned expert
// still costs one upload of its weights per step (and its gradient's way
// back), against two uploads (forward and backward) through the slots. An
// expert with no trainable weight is never refreshed (its LoRA adapters are
// shared with the host, not copied).
//
// Thread safety: one thread at a time: the device's own thread during a
// group call, the caller's thread between calls.
#ifndef EXPERTD_ENGINE_TRAIN_DEVICE_EXPERT_CACHE_H_
#define EXPERTD_ENGINE_TRAIN_DEVICE_EXPERT_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/train/device_memory.h"
#include "engine/train/expert_uploader.h"
#include "engine/train/moe_block.h"
#include "engine/train/trace_recorder.h"

namespace expertd::train {

class DeviceExpertCache {
 public:
  // `device` must outlive the cache; `name` ("training device 1") labels its
  // uploads in the trace.
  DeviceExpertCache(DeviceMemoryTracker* device, std::string name);

  // The cached copy of `layer`'s `expert`, or null.
  DeviceExpert* Find(int layer, int expert);
  // The bytes Load would copy now: 0 when cached and current, else the
  // expert's weights.
  int64_t LoadBytes(int layer, int expert, const MlpParams& host) const;
  // Makes the entry present and current: reserves its weights and gradient
  // when new (the tracker's ResourceExhausted, naming the expert, when they
  // do not fit; nothing is cached then), and uploads the host's weights when
  // new or stale. Returns the bytes copied.
  absl::StatusOr<int64_t> Load(int layer, int expert, const MlpParams& host, TraceRecorder* trace);
  // Drops the entries of `layer` whose expert `keep` rejects, freeing their bytes.
  void Retain(int layer, const std::function<bool(int expert)>& keep);
  void Clear() { entries_.clear(); }
  // The host weights changed (an optimizer step): trained entries are stale.
  void MarkStale();

  int size() const { return static_cast<int>(entries_.size()); }
  int64_t bytes() const;  // reserved by the entries
  DeviceMemoryTracker* device() const { return device_; }
  const std::string& name() const { return name_; }

 private:
  struct Entry {
    std::unique_ptr<DeviceExpert> expert;
    bool stale = false;
  };

  DeviceMemoryTracker* const device_;
  const std::string name_;
  std::map<std::pair<int, int>, Entry> entries_;  // by (layer, expert)
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_DEVICE_EXPERT_CACHE_H_
