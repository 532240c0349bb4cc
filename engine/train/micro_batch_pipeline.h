// MPMoE's pieces: the three-stage pipeline that runs a layer's expert slices
// (dispatch -> expert compute -> combine on separate threads, buffers reused
// across slices), the two ways backward gets back what a slice's forward
// computed, and the run-time choice of (micro-batches, restore strategy) by
// profiling per range of token counts.
//
// Restore strategies (MPMoE keeps nothing of a slice on the device after its
// forward, so backward must restore it):
//   recompute: backward gathers the slice's rows again and reruns its
//              forward (counted in FLOPs);
//   offload:   forward's combine stage copies the slice's activations
//              (gate, up, act, out) to host buffers (counted in bytes);
//              backward's dispatch stage gathers the slice's input rows again
//              (the layer input is kept anyway) and copies the activations
//              back instead of recomputing them.
// Both give backward bitwise the same activations (the forward is
// deterministic), so the strategy never changes a result, only time and
// host memory.
#ifndef EXPERTD_ENGINE_TRAIN_MICRO_BATCH_PIPELINE_H_
#define EXPERTD_ENGINE_TRAIN_MICRO_BATCH_PIPELINE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/train/moe_block.h"
#include "engine/train/train_schedule.h"

namespace expertd::train {

// Runs stage[0..2](t) for t in [0, count): inline, or on three threads where
// stage k of item t waits for stage k-1 of t and for stage k+1 of t-2 (each
// stage boundary has two buffers, reused for items t and t+2). The first
// failing stage stops the others and its status is returned.
absl::Status RunThreeStages(size_t count, bool threaded,
                            const std::array<std::function<absl::Status(size_t)>, 3>& stage);

// One slice's forward activations, kept in host memory by the offload
// strategy.
struct HostSlice {
  MlpActivations acts;
  int64_t bytes() const;
};

// Copies `acts` into *dst; returns the bytes copied.
int64_t CopySlice(const MlpActivations& acts, HostSlice* dst);
// Copies a host slice back into a device buffer; returns the bytes copied.
int64_t RestoreSlice(const HostSlice& src, MlpActivations* acts);

// The (n, strategy) candidates and their measured seconds per token-count
// range (log2 of the busiest expert's rows). Fixed choices (n > 0, strategy
// not auto) narrow the candidates.
class MicroBatchProfile {
 public:
  struct Choice {
    int micro_batches = 2;
    ActivationRestore restore = ActivationRestore::kRecompute;
  };

  // The next unmeasured candidate for this range, else the fastest measured.
  Choice Choose(int64_t max_rows, int fixed_micro_batches, ActivationRestore fixed_restore) const;
  // Keeps the first measurement of a candidate (later ones are in steady use).
  void Record(int64_t max_rows, Choice c, double seconds);

  static int Range(int64_t max_rows);

 private:
  std::map<int, std::map<std::pair<int, int>, double>> seconds_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_MICRO_BATCH_PIPELINE_H_
