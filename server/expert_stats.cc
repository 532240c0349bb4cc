#include "server/expert_stats.h"

#include "server/proto_time.h"

namespace expertd::server {
namespace {

void FillCounters(const engine::ExpertLayerCounters& c, v1::ExpertCounters* out) {
  // A prefetched expert that was ready (or in flight) when needed is a hit.
  out->set_hits(c.hits + c.prefetch_hits);
  out->set_misses(c.misses);
  out->set_prefetch_issued(c.prefetch_issued);
  out->set_prefetch_used(c.prefetch_used);
  out->set_prefetch_wasted(c.prefetch_wasted);
  out->set_bytes_host_to_device(c.bytes_host_to_device);
  out->set_bytes_disk_to_host(c.bytes_disk_to_host);
  ToProtoDuration(absl::Nanoseconds(c.stall_ns), out->mutable_stall_time());
  out->set_host_computes(static_cast<uint64_t>(c.host_computes));
}

}  // namespace

void FillExpertStats(const engine::ExpertStoreStats& s, int64_t tokens_processed,
                     v1::ExpertStats* out) {
  out->set_policy(s.policy);
  out->set_prefetch(s.prefetch);
  out->set_device_cache_capacity_bytes(static_cast<uint64_t>(s.device_slots) * s.slot_bytes);
  out->set_device_cache_used_bytes(static_cast<uint64_t>(s.device_resident) * s.slot_bytes);
  out->set_host_tier_capacity_bytes(static_cast<uint64_t>(s.host_slots) * s.slot_bytes);
  out->set_host_tier_used_bytes(static_cast<uint64_t>(s.host_resident) * s.slot_bytes);
  FillCounters(s.total, out->mutable_totals());
  for (const engine::ExpertLayerCounters& c : s.layers) {
    v1::LayerExpertStats* l = out->add_layers();
    l->set_layer(static_cast<uint32_t>(c.layer));
    FillCounters(c, l->mutable_counters());
  }
  out->set_tokens_processed(static_cast<uint64_t>(tokens_processed));
}

void FillExpertPlacement(const std::vector<engine::ExpertPlacementEntry>& placement,
                         v1::ExpertStats* out) {
  std::vector<uint32_t> on_device;
  for (const engine::ExpertPlacementEntry& p : placement) {
    v1::ExpertPlacement* e = out->add_experts();
    e->set_layer(static_cast<uint32_t>(p.layer));
    e->set_expert(static_cast<uint32_t>(p.expert));
    switch (p.tier) {
      case engine::ExpertPlacementEntry::Tier::kDevice:
        e->set_tier(v1::EXPERT_TIER_DEVICE);
        break;
      case engine::ExpertPlacementEntry::Tier::kHost:
        e->set_tier(v1::EXPERT_TIER_HOST);
        break;
      case engine::ExpertPlacementEntry::Tier::kDisk:
        e->set_tier(v1::EXPERT_TIER_DISK);
        break;
    }
    e->set_uses(p.token_uses);
    if (p.tier == engine::ExpertPlacementEntry::Tier::kDevice) {
      if (on_device.size() <= static_cast<size_t>(p.layer)) on_device.resize(p.layer + 1, 0);
      ++on_device[p.layer];
    }
  }
  for (v1::LayerExpertStats& l : *out->mutable_layers()) {
    if (l.layer() < on_device.size()) l.set_experts_on_device(on_device[l.layer()]);
  }
}

ExpertCacheSnapshot ToMetricsSnapshot(const engine::ExpertStoreStats& s) {
  ExpertCacheSnapshot snap;
  snap.format = s.stored_format;
  for (const engine::ExpertLayerCounters& c : s.layers) {
    ExpertLayerCounters l;
    l.layer = c.layer;
    l.hits = static_cast<uint64_t>(c.hits + c.prefetch_hits);
    l.misses = static_cast<uint64_t>(c.misses);
    l.prefetch_issued = static_cast<uint64_t>(c.prefetch_issued);
    l.prefetch_used = static_cast<uint64_t>(c.prefetch_used);
    l.prefetch_wasted = static_cast<uint64_t>(c.prefetch_wasted);
    l.bytes_host_to_device = c.bytes_host_to_device;
    l.bytes_disk_to_host = c.bytes_disk_to_host;
    l.stall_seconds = c.stall_ns * 1e-9;
    l.host_computes = static_cast<uint64_t>(c.host_computes);
    snap.layers.push_back(l);
  }
  snap.device_capacity_bytes = static_cast<uint64_t>(s.device_slots) * s.slot_bytes;
  snap.device_used_bytes = static_cast<uint64_t>(s.device_resident) * s.slot_bytes;
  snap.host_capacity_bytes = static_cast<uint64_t>(s.host_slots) * s.slot_bytes;
  snap.host_used_bytes = static_cast<uint64_t>(s.host_resident) * s.slot_bytes;
  return snap;
}

ExpertCacheSnapshot ToMetricsSnapshot(const std::vector<engine::ExpertStoreStats>& devices) {
  ExpertCacheSnapshot sum;
  for (const engine::ExpertStoreStats& s : devices) {
    const ExpertCacheSnapshot d = ToMetricsSnapshot(s);
    if (sum.format.empty()) sum.format = d.format;
    // Every device's store holds the same MoE layers, in the same order.
    if (sum.layers.empty()) {
      sum.layers = d.layers;
    } else {
      for (size_t i = 0; i < d.layers.size() && i < sum.layers.size(); ++i) {
        ExpertLayerCounters& l = sum.layers[i];
        const ExpertLayerCounters& o = d.layers[i];
        l.hits += o.hits;
        l.misses += o.misses;
        l.prefetch_issued += o.prefetch_issued;
        l.prefetch_used += o.prefetch_used;
        l.prefetch_wasted += o.prefetch_wasted;
        l.bytes_host_to_device += o.bytes_host_to_device;
        l.bytes_disk_to_host += o.bytes_disk_to_host;
        l.stall_seconds += o.stall_seconds;
        l.host_computes += o.host_computes;
        l.experts_on_device += o.experts_on_device;
      }
    }
    sum.device_capacity_bytes += d.device_capacity_bytes;
    sum.device_used_bytes += d.device_used_bytes;
    sum.host_capacity_bytes += d.host_capacity_bytes;
    sum.host_used_bytes += d.host_used_bytes;
  }
  return sum;
}

}  // namespace expertd::server
