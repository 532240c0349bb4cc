#include "engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::train {

double ScheduledLr(const TrainOptions& o, int64_t step) {
  if (step < o.warmup_steps) {
    return o.lr * static_cast<double>(step) /
           static_cast<double>(std::max<int64_t>(1, o.warmup_steps));
  }
  const double progress = static_cast<double>(step - o.warmup_steps) /
                          static_cast<double>(std::max<int64_t>(1, o.total_steps - o.warmup_steps));
  switch (o.schedule) {
    case LrSchedule::kConstant:
      return o.lr;
    case LrSchedule::kLinear:
      return o.lr * std::max(0.0, 1.0 - progress);
    case LrSchedule::kCosine:
      return o.lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
  }
  return o.lr;
}

void ApplyScope(TrainScope scope, TrainModel* model) {
  const bool full = scope == TrainScope::kFull;
  for (Parameter& p : model->params()) {
    p.trainable = scope == TrainScope::kLora ? (p.name.rfind("base_model.model.", 0) == 0) : full;
  }
  if (scope != TrainScope::kExperts) return;
  auto train_mlp = [](const MlpParams& m) {
    if (m.gate == nullptr) return;
    m.gate->trainable = m.up->trainable = m.down->trainable = true;
  };
  for (const LayerParams& l : model->layers()) {
    if (!l.ffn.moe) continue;
    l.ffn.router->trainable = true;
    for (const MlpParams& e : l.ffn.experts) train_mlp(e);
    train_mlp(l.ffn.shared);
    if (l.ffn.shared_gate != nullptr) l.ffn.shared_gate->trainable = true;
  }
}

Trainer::Trainer(TrainModel* model, TrainOptions options)
    : model_(model),
      options_(options),
      pool_(options.threads > 1 ? std::make_unique<engine::ThreadPool>(options.threads) : nullptr),
      optimizer_(options.adamw) {
  ApplyScope(options_.scope, model_);
  const TrainSchedule& sch = options_.memory_schedule;
  if (!sch.active()) return;
  device_ = std::make_unique<DeviceMemoryTracker>(sch.device_memory_bytes);
  if (!sch.trace_out.empty()) trace_ = std::make_unique<TraceRecorder>();
  auto executor = std::make_unique<ScheduledFeedForwardExecutor>(sch, device_.get(), trace_.get());
  executor_ = executor.get();
  model_->set_feed_forward_executor(std::move(executor));
  model_->set_device_memory(device_.get());
  if (trace_ != nullptr) {
    optimizer_.set_observer([this](const Parameter& p, int64_t start_us, int64_t end_us) {
      trace_->Record("AdamW " + p.name, TraceRecorder::kOptimizer, start_us, end_us);
    });
    optimizer_.set_clock([this] { return trace_->NowMicros(); });
  }
}

namespace {

// What a parameter holds on the device while it trains: its weight, and when
// trainable its gradient, AdamW moments and (bf16/fp16) fp32 master copy.
int64_t StaticBytes(const Parameter& p) {
  const int64_t f = p.numel() * static_cast<int64_t>(sizeof(float));
  if (!p.trainable) return f;
  return 4 * f + (p.dtype != models::DType::kF32 ? f : 0);
}

}  // namespace

absl::Status Trainer::PlanPlacement(bool force_host, const std::string& why) {
  static_bytes_.Reset();
  std::set<const Parameter*> experts;
  for (const LayerParams& l : model_->layers()) {
    for (const MlpParams& e : l.ffn.experts) experts.insert({e.gate, e.up, e.down});
  }
  int64_t expert_bytes = 0, other_bytes = 0;
  for (const Parameter& p : model_->params()) {
    (experts.count(&p) ? expert_bytes : other_bytes) += StaticBytes(p);
  }
  const TrainSchedule& sch = options_.memory_schedule;
  const int64_t limit = device_->limit();
  const bool fits = limit <= 0 || expert_bytes + other_bytes <= limit;
  ScheduleReport& r = placement_;
  r.device_memory_bytes = limit;
  const bool host = sch.offload_experts && (force_host || !fits);
  if (host) {
    r.expert_placement = "host";
    r.placement_reason =
        force_host ? why
                   : absl::StrCat("experts (", expert_bytes, " bytes with gradients and AdamW "
                                  "state) and the rest (", other_bytes, " bytes) exceed the device's ",
                                  limit, " bytes");
    if (sch.host_memory_bytes > 0 && expert_bytes > sch.host_memory_bytes) {
      return absl::UnimplementedError(absl::StrCat(
          "the experts need ", expert_bytes, " bytes of host memory, more than --host_memory_bytes=",
          sch.host_memory_bytes, ", and the SSD tier is not implemented yet"));
    }
  } else {
    r.expert_placement = "resident";
    r.placement_reason =
        limit <= 0 ? "no device memory limit"
                   : absl::StrCat("weights, gradients and AdamW state (", expert_bytes + other_bytes,
                                  " bytes) fit in ", limit, " bytes");
  }
  r.static_device_bytes = other_bytes + (host ? 0 : expert_bytes);
  executor_->set_offload(host);
  planned_ = true;
  return static_bytes_.Acquire(
      device_.get(), r.static_device_bytes,
      host ? "the non-expert weights, gradients and AdamW state"
           : "the weights, gradients and AdamW state (--offload_experts moves the experts' to "
             "the host)");
}

absl::StatusOr<StepReport> Trainer::Step(
    const std::vector<TrainBatch>& micro_batches,
    const std::function<void(const TrainModel&)>& before_clip) {
  if (device_ == nullptr) return RunStep(micro_batches, before_clip);
  if (!planned_) RETURN_IF_ERROR(PlanPlacement(false, ""));
  device_->ResetPeak();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<StepReport> r = RunStep(micro_batches, before_clip);
  // Adaptive: resident until the device runs out, then the host tier (once;
  // a step that failed before its update changed nothing but gradients).
  if (!r.ok() && absl::IsResourceExhausted(r.status()) && options_.memory_schedule.offload_experts &&
      !executor_->offload()) {
    RETURN_IF_ERROR(PlanPlacement(
        true, absl::StrCat("resident training ran out of device memory: ", r.status().message())));
    device_->ResetPeak();
    r = RunStep(micro_batches, before_clip);
  }
  if (!r.ok()) return r.status();
  r->memory_schedule = placement_;
  r->memory_schedule.peak_device_bytes = device_->peak();
  r->memory_schedule.step_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  executor_->TakeStats(&r->memory_schedule);
  return r;
}

absl::Status Trainer::WriteTrace() const {
  if (trace_ == nullptr) return absl::OkStatus();
  return trace_->WriteJson(options_.memory_schedule.trace_out);
}

absl::StatusOr<StepReport> Trainer::RunStep(
    const std::vector<TrainBatch>& micro_batches,
    const std::function<void(const TrainModel&)>& before_clip) {
  if (micro_batches.empty()) return absl::InvalidArgumentError("a step needs a batch");
  for (Parameter& p : model_->params()) p.ClearGrad();  // zero_grad(set_to_none=True)
  StepReport report;
  const float scale = 1.0f / static_cast<float>(micro_batches.size());
  for (const TrainBatch& batch : micro_batches) {
    ASSIGN_OR_RETURN(LossBreakdown loss,
                     model_->Step(batch, /*backward=*/true, scale, pool_.get()));
    report.loss.total += loss.total * scale;
    report.loss.ce += loss.ce * scale;
    report.loss.aux += loss.aux * scale;
    report.loss.predicted_tokens += loss.predicted_tokens;
  }
  if (before_clip) before_clip(*model_);
  // torch.nn.utils.clip_grad_norm_: the 2-norm of the per-parameter 2-norms.
  double total_sq = 0.0;
  for (const Parameter& p : model_->params()) {
    if (!p.has_grad) continue;
    double sq = 0.0;
    for (float g : p.grad) sq += static_cast<double>(g) * g;
    const float norm = static_cast<float>(std::sqrt(sq));
    total_sq += static_cast<double>(norm) * norm;
  }
  const float total_norm = static_cast<float>(std::sqrt(total_sq));
  report.grad_norm_before_clip = total_norm;
  if (options_.clip_norm > 0.0) {
    const float coef = static_cast<float>(options_.clip_norm) / (total_norm + 1e-6f);
    report.clip_coef = std::min(coef, 1.0f);
    for (Parameter& p : model_->params()) {
      if (!p.has_grad) continue;
      for (float& g : p.grad) g *= report.clip_coef;
    }
  }
  report.lr = ScheduledLr(options_, steps_done_);
  optimizer_.Step(&model_->params(), report.lr, pool_.get());
  ++steps_done_;
  return report;
}

absl::StatusOr<LossBreakdown> Trainer::Evaluate(const TrainBatch& batch) {
  return model_->Step(batch, /*backward=*/false, 1.0f, pool_.get());
}

}  // namespace expertd::train
