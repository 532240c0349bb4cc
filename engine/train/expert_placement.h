// ES-MoE's per-step placement of a MoE layer's routed experts over D devices.
//
// Each expert costs what it keeps its device busy for in one forward and
// backward: what it moves between host and device (ExpertTransfer: less when
// pinned, as it stayed on its device from the previous step) plus compute
// proportional to the tokens routed to it. Graham's greedy (longest processing time first): the
// unpinned experts, costliest first, each go to the least-loaded device. The
// hottest quarter of the previous step's experts (by tokens) stay pinned on
// the device they ran on, which is their load before the greedy starts.
//
// Guarantee: without pins the makespan is at most (4/3 - 1/(3D)) of the
// optimum (Graham 1969). Pinned experts make the devices start unequally
// loaded; for that case LPT's bound is (3/2 - 1/(2D)) of the optimum with the
// same pins (Lee 1991). expert_placement_test checks both against brute
// force.
//
// Thread safety: ExpertPlacer is used by one thread at a time.
#ifndef EXPERTD_ENGINE_TRAIN_EXPERT_PLACEMENT_H_
#define EXPERTD_ENGINE_TRAIN_EXPERT_PLACEMENT_H_

#include <cstdint>
#include <vector>

namespace expertd::train {

// Where each expert runs, and what the devices' loads come to.
struct ExpertPlacement {
  std::vector<int> device;   // per expert: the device that runs it
  std::vector<bool> pinned;  // per expert: stayed on its device from the previous step
  // Per expert: in this step's hottest quarter, so pinned in the next
  // (HottestQuarter of this step's rows): kept on its device from now on.
  std::vector<bool> kept;
  std::vector<double> load;  // per device: seconds of modelled work
  // What the experts with rows move in the forward and backward, modelled.
  int64_t transfer_bytes = 0;
  double makespan() const;   // the largest load
  double imbalance() const;  // largest / mean load; 1 when balanced or idle
};

// Graham's LPT: jobs with cost[j] >= 0; fixed[j] is a device (the job stays
// there and loads it before the greedy) or -1 (free). Free jobs go costliest
// first (ties: lower index) to the least-loaded device (ties: lower device).
// REQUIRES: devices >= 1; fixed empty or cost.size() entries in [-1, devices).
ExpertPlacement PlaceLongestFirst(const std::vector<double>& cost, int devices,
                                  const std::vector<int>& fixed);

// The cost model. Defaults: a PCIe 4 x16 link and a modest accelerator; the
// ratio is what matters to the greedy.
struct PlacementCostModel {
  double upload_bytes_per_second = 16e9;
  double flops_per_second = 50e12;
};

// The bytes one forward and backward of an expert moves between host and
// device, by how it runs.
struct ExpertTransfer {
  int64_t slots = 0;   // through its device's slots: not pinned, not kept
  int64_t pinned = 0;  // pinned: on its device since the previous step
  int64_t kept = 0;    // not pinned but kept from this step on (joins the device)
};

// Places one layer's experts every step, remembering the previous step's
// placement and routing for the pins.
class ExpertPlacer {
 public:
  ExpertPlacer(int devices, PlacementCostModel model = {});

  // rows[e]: tokens routed to expert e this step; expert_bytes[e]: the bytes
  // an upload of e moves; flops_per_row[e]: its forward + backward FLOPs per
  // token. An expert with no rows costs nothing (nothing to upload or run).
  ExpertPlacement Place(const std::vector<int64_t>& rows, const std::vector<int64_t>& expert_bytes,
                        const std::vector<int64_t>& flops_per_row);
  // As above, with each expert's transfer by fate (the overload above is
  // {expert_bytes, 0, expert_bytes}: pinned experts move nothing).
  ExpertPlacement Place(const std::vector<int64_t>& rows,
                        const std::vector<ExpertTransfer>& transfer,
                        const std::vector<int64_t>& flops_per_row);

  int devices() const { return devices_; }
  // The model for the next Place (e.g. a compute rate measured on the devices).
  void set_model(const PlacementCostModel& model) { model_ = model; }
  const PlacementCostModel& model() const { return model_; }

 private:
  const int devices_;
  PlacementCostModel model_;
  std::vector<int64_t> previous_rows_;
  std::vector<int> previous_device_;
};

// The experts to pin from the previous step's rows: the hottest
// floor(E / 4), ties to the lower index, experts with no rows never.
std::vector<bool> HottestQuarter(const std::vector<int64_t>& previous_rows);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_EXPERT_PLACEMENT_H_
