#include "engine/train/trainer.h"

#include <cmath>

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
}

absl::StatusOr<StepReport> Trainer::Step(
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
