// The load path of ExpertStore, run on transfer workers:
//   host tier hit  -> copy host slot -> device slot
//   miss           -> read the pack into a host slot (or a staging buffer, or
//                     straight into the device slot when the backend's device
//                     memory is host memory and there is no host tier)
//                  -> copy -> device slot
// A pack read that fails its checksum is repaired from the checkpoint (the
// expert is rebuilt in memory, checked against the pack's CRC, served, and
// written back into the pack).
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/experts/expert_store.h"
#include "engine/experts/pack/expert_pack_writer.h"
#include "engine/experts/pack/pack_builder.h"

namespace expertd::engine {

void ExpertStore::SyncHostPin(ExpertKey key, HostEntry* e) {
  const bool want = !e->ready() || e->users > 0;
  if (want == e->pinned) return;
  if (want) {
    host_policy_->Pin(key);
  } else {
    host_policy_->Unpin(key);
  }
  e->pinned = want;
}

int32_t ExpertStore::TakeHostSlot() {
  if (free_host_slots_.empty()) {
    std::optional<ExpertKey> victim = host_policy_->Victim();
    if (!victim.has_value()) return -1;
    auto it = host_.find(*victim);
    host_policy_->Erase(*victim);
    free_host_slots_.push_back(it->second.slot);
    host_.erase(it);
  }
  const int32_t slot = free_host_slots_.back();
  free_host_slots_.pop_back();
  return slot;
}

ExpertStore::Staging ExpertStore::BeginLoad(ExpertKey key, int32_t device_slot) {
  absl::MutexLock lock(&mu_);
  Staging st;
  ExpertLayerCounters& c = Counters(key.layer);
  auto it = host_.find(key);
  if (it != host_.end() && it->second.ready()) {
    ++it->second.users;
    SyncHostPin(key, &it->second);
    host_policy_->Touch(key);
    ++c.host_hits;
    st.host_hit = true;
    st.ptr = HostSlot(it->second.slot);
    return st;
  }
  ++c.disk_reads;
  if (host_slots_ == 0 && backend_->host_memory_is_device_memory()) {
    st.direct = true;
    st.ptr = DeviceSlot(device_slot);
    return st;
  }
  if (it == host_.end() && host_slots_ > 0) {
    const int32_t slot = TakeHostSlot();
    if (slot >= 0) {
      HostEntry& h = host_[key];
      h.slot = slot;
      h.users = 1;
      host_policy_->Insert(key);
      host_policy_->Touch(key);
      SyncHostPin(key, &h);
      st.host_slot = slot;
      st.ptr = HostSlot(slot);
      return st;
    }
  }
  // A staging buffer: there is one per worker, so one is always free.
  st.staging = free_staging_.back();
  free_staging_.pop_back();
  if (staging_ptrs_[st.staging] == nullptr) {
    auto buf = backend_->Allocate(slot_bytes_ + kPackAlignment, MemoryKind::kHostPinned);
    if (!buf.ok()) {
      free_staging_.push_back(st.staging);
      st.staging = -1;
      st.ptr = nullptr;  // LoadJob reports the allocation failure
      return st;
    }
    staging_buffers_[st.staging] = std::move(*buf);
    const uintptr_t p = reinterpret_cast<uintptr_t>(staging_buffers_[st.staging].data());
    staging_ptrs_[st.staging] = reinterpret_cast<uint8_t*>(AlignUp(p, kPackAlignment));
  }
  st.ptr = staging_ptrs_[st.staging];
  return st;
}

void ExpertStore::FinishLoad(ExpertKey key, const Staging& st, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ExpertLayerCounters& c = Counters(key.layer);
  if (status.ok()) {
    if (!st.host_hit) c.bytes_disk_to_host += slot_bytes_;
    if (!st.direct) c.bytes_host_to_device += reader_->layout().expert_bytes;
  }
  if (st.host_hit || st.host_slot >= 0) {
    auto it = host_.find(key);
    HostEntry& h = it->second;
    --h.users;
    if (st.host_slot >= 0 && status.ok()) h.state = HostSlotState::kReady;
    if (st.host_slot >= 0 && !status.ok()) {
      if (h.pinned) host_policy_->Unpin(key);  // drop the half-read slot
      host_policy_->Erase(key);
      free_host_slots_.push_back(h.slot);
      host_.erase(it);
    } else {
      SyncHostPin(key, &h);
    }
  }
  if (st.staging >= 0) free_staging_.push_back(st.staging);
  auto it = device_.find(key);
  if (it != device_.end()) {
    if (status.ok()) {
      it->second.state = DeviceSlotState::kReady;
      SyncPin(key, &it->second);
    } else {
      Evict(key);  // whoever waits gets `status`; a later demand retries
    }
  }
  ++loads_finished_;
}

absl::Status ExpertStore::RepairFromSource(ExpertKey key, uint8_t* slot,
                                           const absl::Status& error) {
  EXPERTD_LOG(Warn, "corrupt expert in the pack; repairing it from the checkpoint")
      .With("expert", key.DebugString())
      .With("error", error);
  ASSIGN_OR_RETURN(PackSourceExpert e, MakePackSource(*weights_)(key));
  RETURN_IF_ERROR(FillExpertSlot(reader_->layout(), key, e, slot));
  // The checkpoint must still hold what the pack was built from.
  absl::Status same = reader_->VerifyExpert(key, slot);
  if (!same.ok()) return error;
  absl::Status rewrite = RewriteExpertSlot(reader_->path(), reader_->SlotOffset(key), slot,
                                           slot_bytes_, reader_->env());
  if (!rewrite.ok()) EXPERTD_LOG(Warn, "cannot rewrite the expert pack").With("error", rewrite);
  absl::MutexLock lock(&mu_);
  ++pack_repairs_;
  return absl::OkStatus();
}

absl::Status ExpertStore::LoadJob(ExpertKey key, int32_t device_slot) {
  const Staging st = BeginLoad(key, device_slot);
  const int64_t start = cost_model_ != nullptr ? clock_->NowNanos() : 0;
  absl::Status s;
  if (st.ptr == nullptr) {
    s = absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate a staging buffer of ", slot_bytes_, " bytes"));
  }
  if (s.ok() && !st.host_hit) {
    s = reader_->ReadExpert(key, st.ptr);
    if (absl::IsDataLoss(s)) s = RepairFromSource(key, st.ptr, s);
  }
  if (s.ok() && !st.direct) {
    s = backend_->CopyToDevice(DeviceSlot(device_slot), st.ptr, reader_->layout().expert_bytes);
  }
  if (s.ok() && cost_model_ != nullptr) {  // the page rate the cost model uses
    cost_model_->ObservePage(reader_->layout().expert_bytes,
                             static_cast<double>(clock_->NowNanos() - start) * 1e-9);
  }
  FinishLoad(key, st, s);
  return s;
}

}  // namespace expertd::engine
