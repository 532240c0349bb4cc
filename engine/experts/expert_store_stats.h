// Counters of the expert store, as a plain snapshot (the server exports them
// to the stats RPC and /metrics). All counts are cumulative since creation.
#ifndef EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_STATS_H_
#define EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace expertd::engine {

struct ExpertLayerCounters {
  int32_t layer = -1;  // decoder layer; -1 in the totals

  // Demands: one per (step, distinct expert the layer's router chose).
  int64_t requests = 0;
  int64_t hits = 0;           // resident on the device, not thanks to a prefetch
  int64_t prefetch_hits = 0;  // resident or in flight thanks to a prefetch
  int64_t misses = 0;         // loaded on demand
  int64_t host_hits = 0;      // device loads served by the host tier
  int64_t disk_reads = 0;     // device loads that read the pack

  // Prefetch (loads started before the layer's routing was known).
  int64_t prefetch_issued = 0;
  int64_t prefetch_used = 0;    // demanded by the layer they were issued for
  int64_t prefetch_wasted = 0;  // not demanded (or evicted before)
  // Prediction quality, residency aside: predicted ids vs the router's.
  int64_t predicted = 0;           // predicted experts
  int64_t predicted_correct = 0;   // ... that the router then chose
  int64_t predicted_requests = 0;  // requests of steps where a prediction was made

  int64_t evictions = 0;              // device cache
  uint64_t bytes_disk_to_host = 0;    // pack reads (into host tier or staging)
  uint64_t bytes_host_to_device = 0;  // copies into the device cache
  int64_t stall_ns = 0;               // time Acquire waited for weights

  // Where experts ran (--expert_compute): requests = hits + prefetch_hits +
  // misses (paged) + host_computes.
  int64_t host_computes = 0;    // missed experts computed on the host
  int64_t host_compute_ns = 0;  // host jobs' time (reading the expert included)
  // The routed experts' time per layer (from the plan to the last result),
  // as the cost model predicted it and as measured; both 0 without a model.
  int64_t predicted_expert_ns = 0;
  int64_t measured_expert_ns = 0;

  double hit_rate() const { return requests ? double(hits + prefetch_hits) / requests : 0; }
  double prediction_precision() const {
    return predicted ? double(predicted_correct) / predicted : 0;
  }
  double prediction_recall() const {
    return predicted_requests ? double(predicted_correct) / predicted_requests : 0;
  }
  double prefetch_precision() const {
    return prefetch_issued ? double(prefetch_used) / prefetch_issued : 0;
  }
  void Add(const ExpertLayerCounters& o);
};

struct ExpertStoreStats {
  std::vector<ExpertLayerCounters> layers;  // one per MoE layer, ascending
  ExpertLayerCounters total;
  int64_t steps = 0;
  int64_t device_slots = 0;     // experts the device cache holds
  int64_t host_slots = 0;       // experts the host tier holds
  int64_t device_resident = 0;  // experts on the device now
  int64_t host_resident = 0;
  uint64_t slot_bytes = 0;    // bytes per expert slot (4 KiB multiple)
  uint64_t expert_bytes = 0;  // payload bytes per expert
  // How experts are stored, paged and computed ("as-loaded", "bf16",
  // "int4-g32-f16", ...): every byte counter above is in this format.
  std::string storage;
  // The same, as the pack really stores it: "as-loaded" resolved to the
  // checkpoint's ("bf16", "f32", "fp8-block-g128x128-f32", ...;
  // StoredFormatName). /metrics labels the bytes paged with it.
  std::string stored_format;
  int64_t static_pins = 0;    // hot experts pinned now
  std::string policy, prefetch, pack_path;
  std::string compute = "device";  // --expert_compute
  int64_t host_compute_threads = 0;  // 0 when nothing is computed on the host
  // The cost model's rates now (0 without a model).
  double page_bytes_per_s = 0;
  double host_fixed_s = 0, host_per_token_s = 0;
  double device_fixed_s = 0, device_per_token_s = 0;
  bool direct_io = false;    // pack reads bypass the page cache
  bool pack_built = false;   // this store wrote the pack (else reused)
  int64_t pack_repairs = 0;  // corrupt pack slots rewritten from the checkpoint
};

// Where one routed expert lives now, and how many tokens have been routed to
// it since the store was created.
struct ExpertPlacementEntry {
  enum class Tier { kDevice, kHost, kDisk };
  int32_t layer = 0;
  int32_t expert = 0;
  Tier tier = Tier::kDisk;
  uint64_t token_uses = 0;
};

inline void ExpertLayerCounters::Add(const ExpertLayerCounters& o) {
  requests += o.requests;
  hits += o.hits;
  prefetch_hits += o.prefetch_hits;
  misses += o.misses;
  host_hits += o.host_hits;
  disk_reads += o.disk_reads;
  prefetch_issued += o.prefetch_issued;
  prefetch_used += o.prefetch_used;
  prefetch_wasted += o.prefetch_wasted;
  predicted += o.predicted;
  predicted_correct += o.predicted_correct;
  predicted_requests += o.predicted_requests;
  evictions += o.evictions;
  bytes_disk_to_host += o.bytes_disk_to_host;
  bytes_host_to_device += o.bytes_host_to_device;
  stall_ns += o.stall_ns;
  host_computes += o.host_computes;
  host_compute_ns += o.host_compute_ns;
  predicted_expert_ns += o.predicted_expert_ns;
  measured_expert_ns += o.measured_expert_ns;
}

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_STATS_H_
