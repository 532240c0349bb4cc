// ExpertStoreOptions: how the tiered expert store is sized and behaves. The
// daemon maps its flags onto these fields (docs/offload.md lists the flags).
#ifndef EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_OPTIONS_H_
#define EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "base/clock.h"
#include "engine/experts/compute_cost_model.h"
#include "engine/experts/pack/expert_pack_format.h"
#include "engine/experts/policy/eviction_policy.h"

namespace expertd::engine {

enum class PrefetchKind {
  kNone,         // on demand (MoE-OnDemand)
  kAll,          // every expert of the next MoE layer (MoE-Prefetch)
  kSpeculative,  // next layer's router applied to this layer's hidden state
  kPregate,      // trained pre-gate of this layer (predicts the next MoE layer)
};
const char* PrefetchKindName(PrefetchKind kind);  // "none", "all", "speculative", "pregate"
bool ParsePrefetchKind(absl::string_view name, PrefetchKind* kind);

struct ExpertStoreOptions {
  // ---- Device cache budget (first non-zero wins) ----------------------------
  int64_t device_cache_experts = 0;  // in experts (tests, benchmarks)
  uint64_t device_cache_bytes = 0;   // --expert_cache_bytes
  double device_cache_fraction = 0;  // --expert_cache_percent / 100, of the
                                     // device memory still free at creation
                                     // (needs a device memory limit)
  // All zero: room for every expert (everything ends up resident).

  // ---- Host tier ------------------------------------------------------------
  uint64_t host_cache_bytes = 0;  // --host_expert_bytes; 0 = no host tier
                                  // (every device miss reads the pack)

  // ---- Policy ---------------------------------------------------------------
  PolicyKind policy = PolicyKind::kLru;  // --expert_policy (both tiers)
  double lfu_half_life = 0;              // ticks; 0 = default
  double pin_hot_fraction = 0;           // --pin_hot_fraction (ES-MoE: 0.25)
  int64_t pin_refresh_steps = 16;        // how often the hot set is recomputed

  // ---- Prefetch -------------------------------------------------------------
  PrefetchKind prefetch = PrefetchKind::kNone;  // --prefetch

  // ---- Storage format ---------------------------------------------------------
  // How experts are stored in the pack, and therefore paged and computed
  // (--expert_dtype, --expert_group_size): every tier holds these bytes, so a
  // budget holds 2-4x more int8 / int4 experts than bf16 ones.
  ExpertStorage storage;

  // ---- Where missed experts run (--expert_compute) ----------------------------
  // kDevice pages every missed expert; kHost computes every missed expert on
  // the host from its host copy (give the host tier room for them, else each
  // one is read from the pack); kAuto decides per expert and step with
  // ComputeCostModel, fed by rates measured at creation and refined online.
  ExpertComputeMode compute = ExpertComputeMode::kDevice;
  int host_compute_threads = 0;  // --host_compute_threads; 0 = every hardware thread
  // Measure the cost model's rates also under kDevice, so that its predicted
  // layer times are reported in every mode (benchmarks).
  bool calibrate_compute = false;
  int64_t calibration_tokens = 64;  // the larger token count calibrated (the other is 1)

  // ---- Disk tier ------------------------------------------------------------
  // Where the pack lives. Empty: DIR/.expertd/experts.pack beside the
  // checkpoint, else (read-only DIR, or no DIR) cache_dir/<fingerprint>/.
  std::string pack_dir;          // --expert_pack_dir (used as given)
  std::string cache_dir;         // empty: $XDG_CACHE_HOME/expertd,
                                 // ~/.cache/expertd, /tmp/expertd-cache
  bool direct_io = true;         // O_DIRECT reads where supported
  bool verify_checksums = true;  // CRC32C on every expert read
  int io_threads = 4;            // transfer workers

  // ---- Observability --------------------------------------------------------
  std::string routing_trace_path;  // non-empty: record a routing trace

  Clock* clock = nullptr;  // null: RealClock (stall timings)
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_EXPERT_STORE_OPTIONS_H_
