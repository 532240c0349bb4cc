// ExpertStore::CheckInvariants: the state machine in expert_store.h checked
// against the bookkeeping. Cheap enough for tests to call after every layer.
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/experts/expert_store.h"

namespace expertd::engine {
namespace {

// Marks `slot` as owned; an error when it is out of range or owned twice.
absl::Status Claim(const char* tier, int32_t slot, std::vector<bool>* owned) {
  if (slot < 0 || slot >= static_cast<int32_t>(owned->size())) {
    return absl::InternalError(
        absl::StrCat(tier, " slot ", slot, " out of range [0, ", owned->size(), ")"));
  }
  if ((*owned)[slot])
    return absl::InternalError(absl::StrCat(tier, " slot ", slot, " owned twice"));
  (*owned)[slot] = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status ExpertStore::CheckInvariants() const {
  absl::MutexLock lock(&mu_);
  std::vector<bool> device_owned(device_slots_, false);
  for (int32_t slot : free_device_slots_) {
    if (absl::Status s = Claim("free device", slot, &device_owned); !s.ok()) return s;
  }
  int64_t protected_entries = 0;
  for (const auto& [key, e] : device_) {
    const std::string name = key.DebugString();
    if (absl::Status s = Claim("device", e.slot, &device_owned); !s.ok()) {
      return absl::InternalError(absl::StrCat(name, ": ", s.message()));
    }
    if (!device_policy_->Contains(key))
      return absl::InternalError(absl::StrCat(name, " resident but not in the policy"));
    const bool want = !e.ready() || e.in_use() || e.protect_layer >= 0;
    if (e.pinned != want) {
      return absl::InternalError(
          absl::StrCat(name, " pinned=", e.pinned, " but the pin rule says ", want));
    }
    if (device_policy_->pin_count(key) != (e.pinned ? 1 : 0)) {
      return absl::InternalError(
          absl::StrCat(name, " has ", device_policy_->pin_count(key), " policy pins"));
    }
    if (!e.ready() && e.load == nullptr)
      return absl::InternalError(absl::StrCat(name, " loading without a load"));
    protected_entries += e.protect_layer >= 0;
  }
  for (size_t slot = 0; slot < device_owned.size(); ++slot) {
    if (!device_owned[slot])
      return absl::InternalError(absl::StrCat("device slot ", slot, " lost"));
  }
  if (device_policy_->size() != device_.size()) {
    return absl::InternalError(absl::StrCat("device policy holds ", device_policy_->size(),
                                            " keys, the cache ", device_.size()));
  }
  if (protected_entries != protected_count_) {
    return absl::InternalError(absl::StrCat("protected_count_ ", protected_count_, " but ",
                                            protected_entries, " entries are protected"));
  }
  std::vector<bool> host_owned(host_slots_, false);
  for (int32_t slot : free_host_slots_) {
    if (absl::Status s = Claim("free host", slot, &host_owned); !s.ok()) return s;
  }
  for (const auto& [key, h] : host_) {
    if (absl::Status s = Claim("host", h.slot, &host_owned); !s.ok()) return s;
    if (h.users < 0)
      return absl::InternalError(absl::StrCat(key.DebugString(), " has ", h.users, " host users"));
    if (h.pinned != (!h.ready() || h.users > 0)) {
      return absl::InternalError(
          absl::StrCat(key.DebugString(), " host pin does not match the pin rule"));
    }
    if (!host_policy_->Contains(key))
      return absl::InternalError(absl::StrCat(key.DebugString(), " not in the host policy"));
  }
  for (size_t slot = 0; slot < host_owned.size(); ++slot) {
    if (!host_owned[slot]) return absl::InternalError(absl::StrCat("host slot ", slot, " lost"));
  }
  if (host_policy_->size() != host_.size()) {
    return absl::InternalError(
        absl::StrCat("host policy holds ", host_policy_->size(), " keys, the tier ", host_.size()));
  }
  return absl::OkStatus();
}

}  // namespace expertd::engine
