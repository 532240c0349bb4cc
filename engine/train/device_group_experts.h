// DeviceGroupExperts: a MoE layer's routed experts run over D devices, placed
// every step by ExpertPlacer (ES-MoE: Graham's greedy on upload +
// token-proportional compute, the previous step's hottest quarter pinned).
// The compute rate of the cost model is measured: the first forward's
// devices' FLOPs / compute seconds replaces the default, and every later
// forward moves it halfway to its own (the upload rate stays the model's).
//
// Offloaded experts (set_offload): each device has its own memory (device
// 0's is the step's tracker, which also holds the non-expert weights and the
// activations; every other device gets a tracker of the same limit) and runs
// its placed experts through its own ExpertUploader (two slots on its
// tracker), except the experts it keeps: the placement's pinned ones and
// this step's hottest quarter (pinned next step) live in the device's
// DeviceExpertCache between steps, refreshed once per step after AdamW
// changed them on the host. What the placement models an expert to move is
// what the code moves (weights W, trained weights' gradients G):
//   through the slots   W in forward, W + G in backward    = 2W + G
//   kept from now on    W once into the cache, G back      = W + G
//   pinned              G back, plus W when stale          = G or W + G
// and each forward's report gives the modelled and measured bytes side by
// side. A device whose memory cannot hold its slots or kept experts fails
// the step with ResourceExhausted naming it ("training device d").
//
// The devices are CPU virtual devices: one thread per device (RankThreads),
// talking only through the Collectives interface (InProcessCollectives), as
// NCCL ranks would. Each call is SPMD over the group:
//   forward:  the layer input is broadcast from device 0; each device gathers
//             its experts' rows, runs them (saving their activations for
//             backward on that device) and writes their outputs into its
//             copy of a buffer packed by expert; AllReduceSum combines the
//             copies (each expert's rows are non-zero on one device only, so
//             the sum is exact) and device 0 adds weight * output into y,
//             experts in index order per token as on one device.
//   backward: dy is broadcast; each device runs its experts' backward (their
//             weight gradients accumulate into the expert's gradient, which
//             one device owns in a step), writes d(input) per expert and
//             d(routing weight) per slot into packed buffers; AllReduceSum
//             combines them exactly and device 0 adds d(input) into dx in the
//             single-device order.
// So y, dx and every gradient are bitwise those of one device: no addition
// changes order, the reductions only add zeros (offloaded or not: a device
// copy holds the host's values, and a gradient moved into the host, or added
// to the host's from an earlier micro-batch, is what accumulating in place
// gives).
//
// Thread safety: one call at a time (the step loop's thread); Backward's
// on_expert_done runs on the device threads, several at once.
#ifndef EXPERTD_ENGINE_TRAIN_DEVICE_GROUP_EXPERTS_H_
#define EXPERTD_ENGINE_TRAIN_DEVICE_GROUP_EXPERTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "engine/parallel/collectives.h"
#include "engine/parallel/rank_threads.h"
#include "engine/train/device_expert_cache.h"
#include "engine/train/device_memory.h"
#include "engine/train/expert_placement.h"
#include "engine/train/moe_block.h"
#include "engine/train/moe_memory_model.h"

namespace expertd::train {

// What the group did for one MoE layer's last forward.
struct DevicePlacementReport {
  double imbalance = 1.0;           // modelled max / mean load
  double measured_imbalance = 1.0;  // max / mean of the devices' compute seconds
  double flops_per_second = 0;      // the compute rate the placement assumed
  int pinned_experts = 0;           // kept on their device from the previous step
  // What the placed experts move between host and device in the forward and
  // its backward: modelled (bytes, and seconds at the model's upload rate)
  // and, offloaded, measured (seconds summed over the devices' copies).
  int64_t placed_upload_bytes = 0;
  double placed_upload_seconds = 0;
  int64_t measured_upload_bytes = 0;
  double measured_upload_seconds = 0;
  std::vector<int> experts_per_device;
};

// The devices' memory.
struct DeviceGroupMemory {
  // Device 0's: the step's tracker (non-expert weights, activations, its
  // experts). Null: the group's own, unlimited. Must outlive the group.
  DeviceMemoryTracker* first_device = nullptr;
  int64_t device_bytes = 0;        // each other device's limit; <= 0: unlimited
  TraceRecorder* trace = nullptr;  // uploads; may be null
};

class DeviceGroupExperts {
 public:
  // REQUIRES: devices >= 2.
  explicit DeviceGroupExperts(int devices, PlacementCostModel model = {},
                              DeviceGroupMemory memory = {});

  int devices() const { return threads_.world_size(); }
  // Whether the routed experts live on the host (false: resident, read in
  // place). Turning it off empties the caches.
  void set_offload(bool offload);
  // The host weights changed (after an optimizer step): cached copies of
  // trained experts are uploaded again before their next use.
  void MarkCachedExpertsStale();
  // Empties every device's cache, freeing its memory.
  void DropCachedExperts();
  DeviceMemoryTracker* device_memory(int device) const { return trackers_[device]; }
  const DeviceExpertCache& cache(int device) const { return *caches_[device]; }

  // The routed experts' forward for the layer whose routing is in *a
  // (MoeRoute done; a->expert_slices set): y += the weighted outputs. With
  // one slice it saves a->expert_inputs / expert_acts; with more (MemFine's
  // chunks) each device runs its experts' slices in order and keeps nothing.
  // `layer` keys the placement history (the MoE layer's ordinal).
  absl::Status Forward(const FeedForwardParams& p, const MoeShape& s, int layer, const float* x,
                       FeedForwardActivations* a, float* y);
  // The routed experts' backward under the forward's placement (sliced:
  // each slice recomputed, adding its FLOPs to *recomputed_flops): gradients
  // of the experts accumulate, dweight (N*K) is written, dx += d(input).
  // Offloaded, `on_expert_done` (may be empty) sees each host expert once its
  // gradient is there, on the device threads.
  absl::Status Backward(const FeedForwardParams& p, const MoeShape& s, int layer, const float* x,
                        const FeedForwardActivations& a, const float* dy,
                        std::vector<float>* dweight, float* dx, int64_t* recomputed_flops,
                        const std::function<void(const MlpParams&)>& on_expert_done = {});

  // The last forward's report of every layer, by layer.
  const std::map<int, DevicePlacementReport>& reports() const { return reports_; }
  // Bytes and seconds the devices moved since the last call.
  void TakeMoved(int64_t* bytes, double* seconds);

 private:
  // Runs fn(rank, collectives) on every device with a fresh group; the first
  // failure aborts the group (peers stop waiting) and is returned.
  absl::Status RunGroup(const std::function<absl::Status(int, engine::parallel::Collectives*)>& fn);

  engine::parallel::RankThreads threads_;
  // The placement's cost model; its compute rate follows the devices'
  // measured expert forward rate (FLOPs over busy seconds, averaged).
  PlacementCostModel model_;
  bool rate_measured_ = false;
  std::map<int, ExpertPlacer> placers_;
  std::map<int, ExpertPlacement> placement_;  // by layer: its last forward's
  std::map<int, DevicePlacementReport> reports_;
  bool offload_ = false;
  TraceRecorder* trace_;
  std::vector<std::unique_ptr<DeviceMemoryTracker>> own_trackers_;
  std::vector<DeviceMemoryTracker*> trackers_;              // by device
  std::vector<std::unique_ptr<DeviceExpertCache>> caches_;  // by device
  int64_t moved_bytes_ = 0;
  double moved_seconds_ = 0;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_DEVICE_GROUP_EXPERTS_H_
