// TrainSchedule: how a training step uses memory, independent of what it
// computes. Every schedule computes the same function as plain training
// (docs/training.md says, per schedule, whether bitwise or within 1e-6
// relative). The job system maps its proto TrainingSchedule onto this struct;
// expertd-train maps its flags onto it.
#ifndef EXPERTD_ENGINE_TRAIN_TRAIN_SCHEDULE_H_
#define EXPERTD_ENGINE_TRAIN_TRAIN_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace expertd::train {

// How MPMoE's backward gets back what a micro-batch's forward computed
// (micro_batch_pipeline.h): recompute it, or restore the copy forward
// offloaded to the host. kAuto profiles both. The results are bitwise the
// same either way.
enum class ActivationRestore { kAuto, kRecompute, kOffload };

inline const char* ActivationRestoreName(ActivationRestore r) {
  return r == ActivationRestore::kAuto ? "auto"
         : r == ActivationRestore::kRecompute ? "recompute" : "offload";
}

// "auto" | "recompute" | "offload" into *out; false for anything else.
inline bool ParseActivationRestore(const std::string& name, ActivationRestore* out) {
  for (ActivationRestore r :
       {ActivationRestore::kAuto, ActivationRestore::kRecompute, ActivationRestore::kOffload}) {
    if (name == ActivationRestoreName(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

struct TrainSchedule {
  // ES-MoE: routed experts' weights, gradients and AdamW state live in the
  // host tier; the device holds the experts in flight. Adaptive: experts stay
  // resident when everything fits the device, move to the host otherwise.
  bool offload_experts = false;
  // MemFine: each expert's received tokens split into this many chunks with
  // chunk-level recomputation in backward. 0 = chosen per layer and step by
  // the activation memory model; 1 = off.
  int moe_chunks = 1;
  // MPMoE: each expert's tokens split into this many micro-batches pipelined
  // through dispatch / compute / combine threads with reused stage buffers.
  // 0 = chosen by profiling (n in 2..8 per token-count range); 1 = off.
  int micro_batches = 1;
  // MPMoE's restore strategy for micro-batched experts (micro_batches != 1).
  ActivationRestore activation_restore = ActivationRestore::kAuto;
  // ES-MoE multi-device: each MoE layer's routed experts run over this many
  // devices (CPU virtual devices: one thread each, combined through the
  // collectives), placed every step by Graham's greedy with the previous
  // step's hottest quarter pinned (expert_placement.h). 1 = one device.
  // Combines with offload_experts on the host tier (device_memory_bytes is
  // then each device's), not with the SSD tier or micro_batches.
  int train_devices = 1;
  // The device's memory; 0 = unlimited (no accounting limit).
  int64_t device_memory_bytes = 0;
  // Host tier budget for offloaded experts' training state (weights,
  // gradients, AdamW moments, masters); 0 = unlimited. Past it, the experts
  // that do not fit live in an SSD tier file under ssd_dir (expert_tier.h).
  int64_t host_memory_bytes = 0;
  std::string ssd_dir;
  // Chrome trace JSON of uploads, compute and optimizer steps; empty = none.
  std::string trace_out;

  // True when anything differs from plain in-memory training.
  bool active() const {
    return offload_experts || moe_chunks != 1 || micro_batches != 1 || device_memory_bytes > 0 ||
           !trace_out.empty() || train_devices > 1;
  }
};

// What the schedule did during one optimizer step.
struct ScheduleReport {
  std::string expert_placement;  // "resident" | "host" | "host+ssd"
  std::string placement_reason;
  int64_t device_memory_bytes = 0;  // the budget (0 = unlimited)
  int64_t peak_device_bytes = 0;    // high-water mark of the step
  int64_t static_device_bytes = 0;  // weights, gradients, optimizer state on the device
  int64_t uploaded_bytes = 0;       // expert weights copied host -> device
  double upload_seconds = 0;        // time the upload thread spent copying
  double step_seconds = 0;          // wall time of the whole step
  int64_t ssd_read_bytes = 0, ssd_written_bytes = 0;
  int64_t ssd_waits = 0;        // expert pins that waited for an SSD read
  int64_t ssd_prefetches = 0;   // experts read ahead of use by the I/O thread
  double ssd_wait_seconds = 0;  // time compute and upload spent waiting on them
  // The tier's access sequence against the step's real expert uses
  // (ExpertTier::Stats): both 0 when the sequence Belady evicted by was exact.
  int64_t ssd_skipped_uses = 0, ssd_unplanned_pins = 0;
  // Experts the host budget holds, and the most the host held during the
  // step (above the capacity only while someone read the whole model:
  // Trainer::HoldExpertsOnHost).
  int64_t ssd_host_capacity_experts = 0, ssd_host_peak_experts = 0;
  int64_t recomputed_flops = 0;  // expert forward FLOPs redone in backward
  // Expert AdamW updates (one per expert weight: gate, up, down) run during
  // backward and kept, and those undone and redone after it because clipping
  // bound (see Trainer::RunStep).
  int64_t early_expert_updates = 0, redone_expert_updates = 0;
  int64_t offloaded_activation_bytes = 0;  // MPMoE offload: device -> host in forward
  int64_t restored_activation_bytes = 0;   // and host -> device in backward
  std::vector<int> moe_chunks;                  // per MoE layer, the last chosen c
  std::vector<int> micro_batches;               // per MoE layer, the last chosen n
  // Per MoE layer, how its last backward got the experts' activations back:
  // "saved" (kept from forward), "recompute" or "offload".
  std::vector<std::string> activation_restore;
  int64_t predicted_peak_activation_bytes = 0;  // max over MoE layers (memory model)
  int64_t measured_peak_activation_bytes = 0;   // max over MoE layers (tracker)
  // Multi-device placement (train_devices > 1), per MoE layer, its last
  // forward of the step: modelled and measured max / mean device load, and
  // the experts pinned from the previous step.
  std::vector<double> device_imbalance;
  std::vector<double> measured_device_imbalance;
  std::vector<int> pinned_experts;
  // What those forwards and their backwards move between host and devices,
  // summed over the layers: modelled by the placement (seconds at its upload
  // rate) and, with offloaded experts, measured (seconds summed over the
  // devices' copies). Resident experts move nothing: only modelled.
  int64_t placed_upload_bytes = 0;
  double placed_upload_seconds = 0;
  int64_t measured_placed_upload_bytes = 0;
  double measured_placed_upload_seconds = 0;
  double placement_flops_per_second = 0;  // the compute rate the last placement assumed
  // Offloaded over several devices, per device: its memory's peak in the
  // step, and the experts it keeps cached after the step.
  std::vector<int64_t> device_peak_bytes;
  std::vector<int> device_cached_experts;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_TRAIN_SCHEDULE_H_
