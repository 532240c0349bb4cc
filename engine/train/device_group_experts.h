// DeviceGroupExperts: a MoE layer's routed experts run over D devices, placed
// every step by ExpertPlacer (ES-MoE: Graham's greedy on upload +
// token-proportional compute, the previous step's hottest quarter pinned).
// The compute rate of the cost model is measured: the first forward's
// devices' FLOPs / busy seconds replaces the default, and every later forward
// moves it halfway to its own (the upload rate stays the model's: virtual
// devices copy nothing).
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
// changes order, the reductions only add zeros.
//
// Thread safety: one Forward or Backward at a time (the step loop's thread).
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
#include "engine/train/expert_placement.h"
#include "engine/train/moe_block.h"
#include "engine/train/moe_memory_model.h"

namespace expertd::train {

// What the group did for one MoE layer's last forward.
struct DevicePlacementReport {
  double imbalance = 1.0;           // modelled max / mean load
  double measured_imbalance = 1.0;  // max / mean of the devices' compute seconds
  double flops_per_second = 0;      // the compute rate the placement assumed
  int pinned_experts = 0;           // kept resident from the previous step
  int64_t placed_upload_bytes = 0;  // expert weights the unpinned placement moves
  std::vector<int> experts_per_device;
};

class DeviceGroupExperts {
 public:
  // REQUIRES: devices >= 2.
  explicit DeviceGroupExperts(int devices, PlacementCostModel model = {});

  int devices() const { return threads_.world_size(); }

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
  absl::Status Backward(const FeedForwardParams& p, const MoeShape& s, int layer, const float* x,
                        const FeedForwardActivations& a, const float* dy,
                        std::vector<float>* dweight, float* dx, int64_t* recomputed_flops);

  // The last forward's report of every layer, by layer.
  const std::map<int, DevicePlacementReport>& reports() const { return reports_; }

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
  std::map<int, std::vector<int>> placement_;  // by layer: device per expert
  std::map<int, DevicePlacementReport> reports_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_DEVICE_GROUP_EXPERTS_H_
