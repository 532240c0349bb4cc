// ScheduledFeedForwardExecutor: a layer's feed-forward block under a
// TrainSchedule, on a device whose memory DeviceMemoryTracker models.
//
// - Expert offload (ES-MoE): routed experts live in the host tier; each
//   layer's forward and backward upload them in use order through an
//   ExpertUploader (expert k+1 uploads while expert k computes), tokens
//   grouped per expert, gradients downloaded into the host tier.
// - Chunks (MemFine) and micro-batches (MPMoE): each expert's rows split into
//   c * n slices; nothing of the experts is kept on the device, backward
//   restores each slice by recomputation or, micro-batched, from the host
//   copy forward offloaded (micro_batch_pipeline.h). With n > 1 forward and
//   backward run dispatch, expert compute and combine on three threads over
//   two reused buffers per stage boundary. c = 0 chooses c per layer and step
//   from the memory model (moe_memory_model.h); n = 0 and the auto restore
//   strategy profile (n in 2..8, strategy) per token-count range and keep the
//   fastest.
//
// Summation order: experts run in index order and every token's contributions
// are added in that order, so y and dx are bitwise those of plain training;
// expert weight gradients are bitwise too unless rows are sliced (slices add
// partial sums). With train_devices > 1 the routed experts run over a device
// group (device_group_experts.h), resident or offloaded to the host tier (not
// the SSD tier), without micro-batches, bitwise as on one device. Thread
// safety: one step at a time.
#ifndef EXPERTD_ENGINE_TRAIN_SCHEDULED_FEED_FORWARD_H_
#define EXPERTD_ENGINE_TRAIN_SCHEDULED_FEED_FORWARD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/train/device_group_experts.h"
#include "engine/train/device_memory.h"
#include "engine/train/expert_tier.h"
#include "engine/train/moe_block.h"
#include "engine/train/micro_batch_pipeline.h"
#include "engine/train/moe_memory_model.h"
#include "engine/train/trace_recorder.h"
#include "engine/train/train_schedule.h"

namespace expertd::train {

class ScheduledFeedForwardExecutor : public FeedForwardExecutor {
 public:
  // `device` and `trace` (may be null) must outlive the executor.
  ScheduledFeedForwardExecutor(const TrainSchedule& schedule, DeviceMemoryTracker* device,
                               TraceRecorder* trace);

  // Where the routed experts live: false = resident on the device.
  void set_offload(bool offload) {
    offload_ = offload;
    if (group_ != nullptr) group_->set_offload(offload);
  }
  // The host's expert weights changed (an optimizer step): copies kept on a
  // device (several devices' pinned experts) are uploaded again before use.
  void MarkExpertWeightsChanged() {
    if (group_ != nullptr) group_->MarkCachedExpertsStale();
  }
  // Frees the devices' cached experts (before the device memory goes).
  void DropCachedExperts() {
    if (group_ != nullptr) group_->DropCachedExperts();
  }
  bool offload() const { return offload_; }
  // The SSD tier behind the host tier (null: none); must outlive its use.
  void set_host_tier(ExpertTier* tier) { tier_ = tier; }
  // Offloaded backward: called (on the compute thread; with train_devices >
  // 1 on the device threads, several at once) once an expert's gradient for
  // this backward is complete in the host tier - an idle expert's once its
  // zero gradient is written - while the expert is still pinned there (SSD
  // tier). Null: none.
  void set_on_expert_done(std::function<void(const MlpParams&)> fn) {
    on_expert_done_ = std::move(fn);
  }
  // Called (on the caller's thread) once a MoE layer's router has run in
  // forward, before any expert is used: the experts (indices into p.experts)
  // its forward will use, in order, and those its backward will (the routed
  // ones, then the idle ones given a zero gradient). Null: none.
  using RoutedFn = std::function<void(const FeedForwardParams& p, const std::vector<int>& forward,
                                      const std::vector<int>& backward)>;
  void set_on_routed(RoutedFn fn) { on_routed_ = std::move(fn); }

  absl::Status Forward(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
                       FeedForwardActivations* a, float* y, ThreadPool* pool) override;
  absl::Status Backward(const FeedForwardParams& p, const float* x, const FeedForwardActivations& a,
                        const float* dy, const std::vector<float>& aux_dprob, int64_t n,
                        int64_t hidden, float* dx, ThreadPool* pool) override;

  // The device group (train_devices > 1), else null.
  const DeviceGroupExperts* device_group() const { return group_.get(); }

  // Adds what happened since the last call into *r (uploads, recompute,
  // chosen c and n per MoE layer, predicted vs measured activation peaks).
  void TakeStats(ScheduleReport* r);

 private:
  struct Task {
    int expert;
    int64_t begin, end;  // into the expert's rows
  };
  struct Stats {
    int64_t uploaded_bytes = 0, recomputed_flops = 0, offloaded_bytes = 0, restored_bytes = 0;
    double upload_seconds = 0;
    int64_t predicted_peak = 0, measured_peak = 0;
    std::map<int, int> chunks, micro_batches;  // by MoE layer ordinal
    std::map<int, std::string> restore;
  };
  // A MoE layer's state from its forward to its backward: the (n, strategy)
  // in use (measured when profiling), and the offload strategy's host copies
  // of the slices.
  struct LayerState {
    MicroBatchProfile::Choice choice;
    ActivationRestore restore = ActivationRestore::kRecompute;
    bool profiling = false;
    int64_t max_rows = 0;
    double forward_seconds = 0;
    std::vector<HostSlice> host;
  };
  // Tracks the bytes of the activation buffers a layer really holds.
  class LiveBytes {
   public:
    void Add(int64_t b);
    int64_t peak() const { return peak_; }

   private:
    std::mutex mu_;
    int64_t now_ = 0, peak_ = 0;
  };

  int LayerOrdinal(const FeedForwardParams& p);
  // MemFine's c and MPMoE's n and restore strategy for this layer and step.
  absl::Status ChooseSlicing(const FeedForwardParams& p, const MoeShape& s,
                             const std::vector<int64_t>& rows, int64_t max_rows, int* chunks,
                             int* mb, ActivationRestore* restore);
  // The layer's routing state and saved expert activations (held in a->held
  // until backward), or the forward's reused slice buffers (*working).
  absl::Status ReserveForward(const MoeShape& s, const std::vector<int64_t>& rows, int mb,
                              const std::string& layer, FeedForwardActivations* a,
                              DeviceReservation* working);
  absl::Status DenseForward(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
                            FeedForwardActivations* a, float* y, ThreadPool* pool);
  absl::Status ExpertsForward(const FeedForwardParams& p, const MoeShape& s,
                              const std::vector<Task>& tasks, bool save, int micro_batches,
                              const float* x, FeedForwardActivations* a, float* y,
                              std::vector<HostSlice>* host, LiveBytes* live, ThreadPool* pool);
  // threaded: dispatch / compute / combine on three threads; host: the
  // slices' forward activations to restore (null: recompute unless saved).
  absl::Status ExpertsBackward(const FeedForwardParams& p, const MoeShape& s,
                               const std::vector<Task>& tasks, bool threaded,
                               const std::vector<HostSlice>* host, const float* x,
                               const FeedForwardActivations& a, const float* dy,
                               std::vector<float>* dweight, float* dx, LiveBytes* live,
                               ThreadPool* pool);

  const TrainSchedule schedule_;
  DeviceMemoryTracker* const device_;
  TraceRecorder* const trace_;
  std::unique_ptr<DeviceGroupExperts> group_;  // train_devices > 1
  bool offload_ = false;
  ExpertTier* tier_ = nullptr;
  std::function<void(const MlpParams&)> on_expert_done_;
  RoutedFn on_routed_;
  std::map<const FeedForwardParams*, int> ordinals_;
  std::map<int, int64_t> forward_peak_;  // by MoE layer ordinal, measured
  std::map<int, LayerState> layers_;  // by MoE layer ordinal
  MicroBatchProfile profile_;
  std::mutex stats_mu_;
  Stats stats_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_SCHEDULED_FEED_FORWARD_H_
