#include "engine/train/device_expert_cache.h"

#include "absl/strings/str_cat.h"

namespace expertd::train {

namespace {

bool Trained(const MlpParams& e) {
  return e.gate->trainable || e.up->trainable || e.down->trainable;
}

}  // namespace

DeviceExpertCache::DeviceExpertCache(DeviceMemoryTracker* device, std::string name)
    : device_(device), name_(std::move(name)) {}

DeviceExpert* DeviceExpertCache::Find(int layer, int expert) {
  auto it = entries_.find({layer, expert});
  return it == entries_.end() ? nullptr : it->second.expert.get();
}

int64_t DeviceExpertCache::LoadBytes(int layer, int expert, const MlpParams& host) const {
  auto it = entries_.find({layer, expert});
  const bool current = it != entries_.end() && !(it->second.stale && Trained(host));
  return current ? 0 : ExpertSlotBytes(host, /*with_grads=*/false);
}

absl::StatusOr<int64_t> DeviceExpertCache::Load(int layer, int expert, const MlpParams& host,
                                                TraceRecorder* trace) {
  const int64_t bytes = LoadBytes(layer, expert, host);
  Entry& e = entries_[{layer, expert}];
  if (e.expert == nullptr) {
    auto fresh = std::make_unique<DeviceExpert>();
    absl::Status st = fresh->memory.Acquire(
        device_, ExpertSlotBytes(host, /*with_grads=*/true),
        absl::StrCat("pinned expert ", ExpertName(host), " (weights and gradient)"));
    if (!st.ok()) {
      entries_.erase({layer, expert});
      return st;
    }
    e.expert = std::move(fresh);
  }
  e.stale = false;
  if (bytes > 0) {
    TraceRecorder::Span span(trace, absl::StrCat(name_, ": upload pinned ", ExpertName(host)),
                             TraceRecorder::kUpload);
    UploadExpertWeights(host, e.expert.get());
  }
  return bytes;
}

void DeviceExpertCache::Retain(int layer, const std::function<bool(int)>& keep) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->first.first == layer && !keep(it->first.second)) {
      it = entries_.erase(it);  // its reservation goes with it
    } else {
      ++it;
    }
  }
}

void DeviceExpertCache::MarkStale() {
  for (auto& [key, e] : entries_) e.stale = true;
}

int64_t DeviceExpertCache::bytes() const {
  int64_t b = 0;
  for (const auto& [key, e] : entries_) b += e.expert->memory.bytes();
  return b;
}

}  // namespace expertd::train
