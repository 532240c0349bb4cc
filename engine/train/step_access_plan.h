// StepAccessPlan: the order in which one training step uses the SSD tier's
// experts (expert_tier.h), the future that Belady eviction looks at
// (belady.h). A step is, per micro-batch, the forward of every MoE layer
// (ascending) and its backward (descending), then the gradient norm of the
// experts the last backward did not already measure, then AdamW in parameter
// order. Which experts a layer uses depends on its routing, known only once
// its router has run; until then the plan predicts every expert of the layer
// (a superset of the real uses). Route() replaces the prediction by the
// routed order the moment it is known, SetTail() the norm and optimizer
// parts once the last backward has settled which experts have a gradient.
// So at every point of the step the sequence is exact up to the layers
// routed so far and a superset after them.
//
// Consecutive uses of one expert are one use (the tier's Pin counts a re-pin
// of the expert just used as the same use), so Sequence() merges them.
//
// Thread safety: none; the trainer's thread owns it.
#ifndef EXPERTD_ENGINE_TRAIN_STEP_ACCESS_PLAN_H_
#define EXPERTD_ENGINE_TRAIN_STEP_ACCESS_PLAN_H_

#include <cstddef>
#include <map>
#include <vector>

#include "engine/train/belady.h"

namespace expertd::train {

class StepAccessPlan {
 public:
  // layers[l]: the tier ids of MoE layer l's experts in expert index order;
  // optimizer: the ids the optimizer pins, in parameter order (predicted).
  StepAccessPlan(std::vector<std::vector<int>> layers, size_t micro_batches,
                 std::vector<int> optimizer);

  // The MoE layer owning tier id `id`, or -1.
  int LayerOf(int id) const;
  // Micro-batch b's router of MoE layer `layer` has run: its forward uses
  // `forward`, its backward `backward` (tier ids, in use order). Returns the
  // first position of Sequence() that may change.
  size_t Route(size_t b, size_t layer, std::vector<int> forward, std::vector<int> backward);
  // After the last backward: the experts whose gradient norm is still to be
  // taken, and those the optimizer updates (tier ids, in use order). Returns
  // the first position of Sequence() that may change.
  size_t SetTail(std::vector<int> norm, std::vector<int> optimizer);

  // From the last micro-batch's backward on, uses need the AdamW state too
  // (per-expert updates start there), not only the optimizer's.
  void NeedStateFromLastBackward();

  AccessSequence Sequence() const;
  // The first position of Sequence() whose use needs the AdamW state too:
  // the optimizer's, or the last backward's (NeedStateFromLastBackward).
  size_t state_from() const;

 private:
  size_t ForwardSegment(size_t b, size_t layer) const;
  // The number of positions of Sequence() before segment `s`'s uses: the
  // prefix that revising segment s or later leaves as it is.
  size_t Start(size_t s) const;

  const size_t layers_;
  std::map<int, int> layer_of_;
  // Per micro-batch: forward of layers 0..L-1, backward of L-1..0; then the
  // gradient norm, then the optimizer.
  std::vector<std::vector<int>> segments_;
  size_t state_segment_;  // the first segment needing the AdamW state
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_STEP_ACCESS_PLAN_H_
