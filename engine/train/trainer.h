// Trainer: the step loop. One optimizer step = forward/backward over each
// micro-batch (gradient accumulation: the loss is their mean), global-norm
// clipping, the learning-rate schedule, AdamW. Which parameters train is the
// scope. Deterministic: the same model, options, batches and thread count
// give bitwise the same weights.
//
// Memory schedules (expert offload, chunked MoE, micro-batched experts, a
// device memory limit) come from TrainOptions::memory_schedule: the trainer installs
// a ScheduledFeedForwardExecutor and a DeviceMemoryTracker; the loop stays.
// Past the host budget the experts' state lives in an ExpertTier (SSD): the
// step then pins each expert it touches outside the executor (gradient norm,
// clipping, AdamW) and, between steps, experts not on the host have empty
// values: call HoldExpertsOnHost() before reading the whole model.
#ifndef EXPERTD_ENGINE_TRAIN_TRAINER_H_
#define EXPERTD_ENGINE_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/train/adamw.h"
#include "engine/train/device_memory.h"
#include "engine/train/scheduled_feed_forward.h"
#include "engine/train/expert_tier.h"
#include "engine/train/step_access_plan.h"
#include "engine/train/trace_recorder.h"
#include "engine/train/train_schedule.h"
#include "engine/train/train_model.h"

namespace expertd::train {

enum class TrainScope {
  kFull,     // every parameter
  kExperts,  // routed experts, shared experts (and their gate), routers
  kLora,     // only the LoRA adapters (lora.h); attach them before the Trainer
};

enum class LrSchedule { kConstant, kLinear, kCosine };

struct TrainOptions {
  double lr = 1e-3;
  AdamWOptions adamw;
  double clip_norm = 1.0;  // <= 0: no clipping
  LrSchedule schedule = LrSchedule::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;  // for the linear/cosine decay
  TrainScope scope = TrainScope::kFull;
  int threads = 1;
  TrainSchedule memory_schedule;  // how memory is used (train_schedule.h)
};

// The learning rate of optimizer step `step` (0-based), as Hugging Face's
// get_{constant,linear,cosine}_schedule_with_warmup: warmup ramps
// step/warmup, then constant, linear to 0, or half a cosine to 0.
double ScheduledLr(const TrainOptions& o, int64_t step);

// Marks each parameter of `model` trainable or frozen for `scope`.
void ApplyScope(TrainScope scope, TrainModel* model);

struct StepReport {
  LossBreakdown loss;  // mean over the micro-batches
  double grad_norm_before_clip = 0.0;
  float clip_coef = 1.0f;
  double lr = 0.0;
  ScheduleReport memory_schedule;  // filled when options.memory_schedule.active()
};

class Trainer {
 public:
  // `model` must outlive the trainer.
  Trainer(TrainModel* model, TrainOptions options);
  // With the SSD tier, brings every expert back to the model first (the
  // model is whole again; an I/O error is logged) and removes the file.
  ~Trainer();

  // One optimizer step over `micro_batches` (>= 1). `before_clip`, if set,
  // sees the model right after backward (gradients summed, not yet clipped).
  absl::StatusOr<StepReport> Step(const std::vector<TrainBatch>& micro_batches,
                                  const std::function<void(const TrainModel&)>& before_clip = {});
  // Loss without gradients or updates.
  absl::StatusOr<LossBreakdown> Evaluate(const TrainBatch& batch);

  int64_t steps_done() const { return steps_done_; }
  // Resuming from a checkpoint: the optimizer steps already done (where the
  // learning-rate schedule stands). Restore the optimizer's state() as well.
  void RestoreStepsDone(int64_t steps) { steps_done_ = steps; }
  AdamW& optimizer() { return optimizer_; }
  // With the SSD tier, brings every expert's weights, gradients and AdamW
  // state back to the host (past --host_memory_bytes) until the next step,
  // for whoever reads the whole model (weights out, checkpoints). A no-op
  // without it.
  absl::Status HoldExpertsOnHost();
  // Writes the schedule's Chrome trace to options.memory_schedule.trace_out.
  absl::Status WriteTrace() const;
  // The smallest memory_schedule.host_memory_bytes the SSD tier accepts for
  // `model`: two experts' training state (the uploader's two slots); 0 for a
  // model without routed experts.
  static int64_t MinHostMemoryBytes(const TrainModel& model);

 private:
  // Places weights, gradients and optimizer state (see docs/training.md,
  // "Training past the device memory").
  absl::Status PlanPlacement(bool force_host, const std::string& why);
  absl::StatusOr<StepReport> RunStep(const std::vector<TrainBatch>& micro_batches,
                                     const std::function<void(const TrainModel&)>& before_clip);
  // ES-MoE's per-expert optimizer: true when an offloaded expert's AdamW update
  // starts as soon as its gradient is final (provisional under clipping).
  bool EarlyExpertUpdates() const;
  // What an update changes, saved before a provisional one.
  struct ProvisionalState {
    std::vector<float> value;
    AdamWParamState state;
  };
  // The unclipped update of params[i] during backward; with clipping on it
  // first saves what the update changes into *saved.
  absl::Status ProvisionalUpdate(size_t i, double lr, ProvisionalState* saved);
  // Puts back the saved weights and AdamW state of every updated param and
  // clears its `updated` mark (clipping bound: the update is redone clipped).
  // Returns how many were undone.
  int64_t UndoProvisionalUpdates(std::vector<ProvisionalState>* saved,
                                 std::vector<char>* updated);
  // AdamW on params[i]; an expert in the SSD tier is pinned on the host for
  // it (a use of the step's sequence unless !on_sequence: an early update)
  // and gets its clipping (`clip_coef`, deferred to here) first.
  absl::Status UpdateParam(size_t i, double lr, float clip_coef, engine::ThreadPool* pool,
                           bool on_sequence = true);
  // torch.nn.utils.clip_grad_norm_'s total norm; grad_sq[i] is params[i]'s
  // squared norm where have_sq[i] (else computed here, pinning tier experts).
  absl::StatusOr<float> GradNorm(const std::vector<double>& grad_sq,
                                 const std::vector<char>& have_sq);
  // Past --host_memory_bytes the experts' training state goes to the SSD
  // tier (expert_tier.h); appends the why to *reason.
  absl::Status PlanSsdTier(int64_t expert_bytes, std::string* reason);
  // The order a step will use tier experts, predicted before any router ran:
  // every expert of every MoE layer in each forward and backward, then the
  // optimizer in parameter order.
  StepAccessPlan PredictedAccessPlan(size_t micro_batches) const;
  // After the last backward: the plan's gradient norm and optimizer parts
  // as GradNorm and the update loop will pin them, handed to the tier.
  void ReviseTail(StepAccessPlan* plan, const std::vector<char>& have_sq,
                  const std::vector<char>& updated);
  int TierId(size_t param) const;

  TrainModel* model_;
  TrainOptions options_;
  std::unique_ptr<engine::ThreadPool> pool_;
  AdamW optimizer_;
  int64_t steps_done_ = 0;
  // Schedules only.
  std::unique_ptr<DeviceMemoryTracker> device_;
  std::unique_ptr<TraceRecorder> trace_;
  ScheduledFeedForwardExecutor* executor_ = nullptr;  // owned by model_
  DeviceReservation static_bytes_;
  std::unique_ptr<ExpertTier> tier_;
  bool planned_ = false;
  bool last_step_clipped_ = false;  // the clip coefficient of the last step was < 1
  ScheduleReport placement_;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_TRAINER_H_
