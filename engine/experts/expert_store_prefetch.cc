// The prefetch side of ExpertStore: guesses for the next MoE layer become
// loads at prefetch priority; guesses already resident are protected until
// that layer's routing; wrong guesses leave when it arrives.
#include "base/log.h"
#include "engine/experts/expert_store.h"

namespace expertd::engine {

void ExpertStore::OnRouterInput(const RouterInput& input) {
  if (prefetcher_ == nullptr || input.next_moe_layer < 0) return;
  if (reader_->layout().EntryIndex({input.next_moe_layer, 0}) < 0) return;
  absl::StatusOr<std::vector<int32_t>> guess = prefetcher_->Predict(input);
  if (!guess.ok()) {
    EXPERTD_LOG(Warn, "expert prefetch failed; loading on demand").With("error", guess.status());
    return;
  }
  absl::MutexLock lock(&mu_);
  predictions_[input.next_moe_layer] = *guess;
  IssuePrefetches(input.next_moe_layer, *guess);
}

void ExpertStore::IssuePrefetches(int layer, const std::vector<int32_t>& experts) {
  ExpertLayerCounters& c = Counters(layer);
  for (int32_t expert : experts) {
    const ExpertKey key{layer, expert};
    if (protected_count_ >= max_prefetch_slots_) return;
    auto it = device_.find(key);
    if (it != device_.end()) {
      if (it->second.protect_layer < 0) {
        it->second.protect_layer = layer;
        ++protected_count_;
        SyncPin(key, &it->second);
      }
      continue;
    }
    const int32_t slot = TakeFreeSlot();
    if (slot < 0) return;
    StartLoad(key, slot, TransferPool::kPrefetch);
    DeviceEntry& e = device_[key];
    e.prefetched = true;
    e.protect_layer = layer;
    ++protected_count_;
    SyncPin(key, &e);
    ++c.prefetch_issued;
  }
}

void ExpertStore::ExpireProtections(int layer) {
  std::vector<ExpertKey> wasted;
  for (auto& [key, e] : device_) {
    if (e.protect_layer < 0 || (layer >= 0 && e.protect_layer != layer)) continue;
    e.protect_layer = -1;
    --protected_count_;
    SyncPin(key, &e);
    if (e.prefetched && !e.in_use() && !e.pinned) wasted.push_back(key);
  }
  // A wrong guess leaves at once (Evict counts it wasted) instead of sitting
  // in the cache as if just used: under LRU it would push out a useful expert.
  // One still loading is counted now and ages normally once it lands.
  for (auto& [key, e] : device_) {
    if (e.prefetched && !e.in_use() && e.pinned && e.protect_layer < 0) {
      ++Counters(key.layer).prefetch_wasted;
      e.prefetched = false;
    }
  }
  for (const ExpertKey& key : wasted) Evict(key);
}

}  // namespace expertd::engine
