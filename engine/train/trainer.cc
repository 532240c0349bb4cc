#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "engine/train/optimizer_worker.h"

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

Trainer::~Trainer() {
  // The devices' cached experts hold memory of device_, which goes first.
  if (executor_ != nullptr) executor_->DropCachedExperts();
  if (tier_ == nullptr) return;
  const absl::Status st = tier_->HoldAll();
  if (!st.ok()) {
    EXPERTD_LOG(Error, "SSD tier: experts could not be brought back to the host").With("error", st);
  }
  executor_->set_host_tier(nullptr);
}

namespace {

double SquaredNorm(const std::vector<float>& grad) {
  double sq = 0.0;
  for (float g : grad) sq += static_cast<double>(g) * g;
  return sq;
}

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
    RETURN_IF_ERROR(PlanSsdTier(expert_bytes, &r.placement_reason));
    if (tier_ != nullptr) r.expert_placement = "host+ssd";
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
  const int64_t ssd_read_before = tier_ != nullptr ? tier_->bytes_read() : 0;
  const int64_t ssd_written_before = tier_ != nullptr ? tier_->bytes_written() : 0;
  const ExpertTier::Stats tier_before = tier_ != nullptr ? tier_->stats() : ExpertTier::Stats{};
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
  const ScheduleReport updates = r->memory_schedule;  // RunStep's counts
  r->memory_schedule = placement_;
  r->memory_schedule.early_expert_updates = updates.early_expert_updates;
  r->memory_schedule.redone_expert_updates = updates.redone_expert_updates;
  if (tier_ != nullptr) {
    const ExpertTier::Stats now = tier_->stats();
    r->memory_schedule.ssd_read_bytes = tier_->bytes_read() - ssd_read_before;
    r->memory_schedule.ssd_written_bytes = tier_->bytes_written() - ssd_written_before;
    r->memory_schedule.ssd_waits = now.waits - tier_before.waits;
    r->memory_schedule.ssd_prefetches = now.prefetches - tier_before.prefetches;
    r->memory_schedule.ssd_wait_seconds = now.wait_seconds - tier_before.wait_seconds;
    r->memory_schedule.ssd_skipped_uses = now.skipped_uses - tier_before.skipped_uses;
    r->memory_schedule.ssd_unplanned_pins = now.unplanned_pins - tier_before.unplanned_pins;
    r->memory_schedule.ssd_host_capacity_experts = static_cast<int64_t>(tier_->capacity());
    r->memory_schedule.ssd_host_peak_experts = now.host_peak;
  }
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

int Trainer::TierId(size_t param) const {
  return tier_ == nullptr ? -1 : tier_->IdOf(&model_->params()[param]);
}

absl::Status Trainer::UpdateParam(size_t i, double lr, float clip_coef,
                                  engine::ThreadPool* pool, bool on_sequence) {
  Parameter* p = &model_->params()[i];
  const int id = TierId(i);
  if (id < 0 || !p->has_grad) {
    optimizer_.StepOne(p, i, lr, pool);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(tier_->Pin(id, ExpertTier::Need::kAll, on_sequence));
  if (options_.clip_norm > 0.0) {
    for (float& g : p->grad) g *= clip_coef;
  }
  optimizer_.StepOne(p, i, lr, pool);
  tier_->Unpin(id, /*dirty=*/true);
  return absl::OkStatus();
}

absl::StatusOr<float> Trainer::GradNorm(const std::vector<double>& grad_sq,
                                        const std::vector<char>& have_sq) {
  // torch.nn.utils.clip_grad_norm_: the 2-norm of the per-parameter 2-norms,
  // summed in parameter order whichever order the squares were taken in.
  double total_sq = 0.0;
  for (size_t i = 0; i < model_->params().size(); ++i) {
    const Parameter& p = model_->params()[i];
    if (!p.has_grad) continue;
    double sq = grad_sq[i];
    if (!have_sq[i]) {
      const int id = TierId(i);  // an expert the last backward did not use (ReviseTail)
      if (id >= 0) RETURN_IF_ERROR(tier_->Pin(id, ExpertTier::Need::kWeights));
      sq = SquaredNorm(p.grad);
      if (id >= 0) tier_->Unpin(id, /*dirty=*/false);
    }
    const float norm = static_cast<float>(std::sqrt(sq));
    total_sq += static_cast<double>(norm) * norm;
  }
  return static_cast<float>(std::sqrt(total_sq));
}

absl::Status Trainer::PlanSsdTier(int64_t expert_bytes, std::string* reason) {
  const TrainSchedule& sch = options_.memory_schedule;
  if (tier_ != nullptr || sch.host_memory_bytes <= 0 || expert_bytes <= sch.host_memory_bytes) {
    return absl::OkStatus();
  }
  if (sch.ssd_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the experts' training state (", expert_bytes, " bytes) exceeds --host_memory_bytes=",
        sch.host_memory_bytes, "; give --ssd_dir for the SSD tier"));
  }
  std::vector<Parameter>& params = model_->params();
  auto index = [&](const Parameter* w) { return static_cast<size_t>(w - params.data()); };
  std::vector<ExpertTier::Expert> experts;
  int64_t record = 0;
  for (const LayerParams& l : model_->layers()) {
    for (const MlpParams& e : l.ffn.experts) {
      experts.push_back({e, {index(e.gate), index(e.up), index(e.down)}});
      record = std::max(record, ExpertTier::RecordBytes(e));
    }
  }
  const int64_t capacity = sch.host_memory_bytes / record;
  if (capacity < 2) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "host memory: --host_memory_bytes=", sch.host_memory_bytes, " holds ", capacity,
        " experts' training state (", record, " bytes each: weights, gradients, AdamW state); "
        "the SSD tier needs room for 2 on the host"));
  }
  optimizer_.Prepare(params.size());  // the tier holds pointers into the state
  ASSIGN_OR_RETURN(tier_, ExpertTier::Create(sch.ssd_dir, std::move(experts),
                                             static_cast<size_t>(capacity), &optimizer_.state()));
  executor_->set_host_tier(tier_.get());
  absl::StrAppend(reason, "; their training state (", expert_bytes,
                  " bytes) exceeds --host_memory_bytes=", sch.host_memory_bytes, ": ", capacity,
                  " of ", tier_->size(), " experts (", record,
                  " bytes each) stay on the host, the rest in the SSD tier ", tier_->path(), " (",
                  tier_->file_bytes(), " bytes, ",
                  tier_->direct_io() ? "O_DIRECT" : "buffered: the file system refused O_DIRECT",
                  "; Belady eviction, prefetch in the step's expert order)");
  return absl::OkStatus();
}

StepAccessPlan Trainer::PredictedAccessPlan(size_t micro_batches) const {
  std::vector<std::vector<int>> layers;
  for (const LayerParams& l : model_->layers()) {
    if (l.ffn.experts.empty()) continue;
    layers.emplace_back();
    for (const MlpParams& e : l.ffn.experts) layers.back().push_back(tier_->IdOf(e.gate));
  }
  std::vector<int> optimizer;  // AdamW, in parameter order
  for (size_t i = 0; i < model_->params().size(); ++i) {
    const int id = TierId(i);
    if (id >= 0 && (optimizer.empty() || optimizer.back() != id)) optimizer.push_back(id);
  }
  return StepAccessPlan(std::move(layers), micro_batches, std::move(optimizer));
}

void Trainer::ReviseTail(StepAccessPlan* plan, const std::vector<char>& have_sq,
                         const std::vector<char>& updated) {
  // The pins GradNorm and the update loop will make, in their order.
  std::vector<int> norm, optimizer;
  for (size_t i = 0; i < model_->params().size(); ++i) {
    const int id = TierId(i);
    if (id < 0 || !model_->params()[i].has_grad) continue;
    if (!have_sq[i] && (norm.empty() || norm.back() != id)) norm.push_back(id);
    if (!updated[i] && (optimizer.empty() || optimizer.back() != id)) optimizer.push_back(id);
  }
  const size_t unchanged = plan->SetTail(std::move(norm), std::move(optimizer));
  tier_->ReviseSequence(plan->Sequence(), unchanged, plan->state_from());
}

int64_t Trainer::MinHostMemoryBytes(const TrainModel& model) {
  int64_t record = 0;
  for (const LayerParams& l : model.layers()) {
    for (const MlpParams& e : l.ffn.experts) record = std::max(record, ExpertTier::RecordBytes(e));
  }
  return 2 * record;
}

absl::Status Trainer::HoldExpertsOnHost() {
  return tier_ == nullptr ? absl::OkStatus() : tier_->HoldAll();
}

bool Trainer::EarlyExpertUpdates() const {
  if (executor_ == nullptr || !executor_->offload()) return false;
  // With the SSD tier only without clipping: a provisional update's saved
  // copy of every early-updated expert's weights and AdamW state would hold
  // the experts' whole training state in RAM, past the host budget the tier
  // exists for.
  if (tier_ != nullptr) return options_.clip_norm <= 0.0;
  // With clipping the updates are provisional (see RunStep): worth it unless
  // the previous step clipped, when this one most likely clips too.
  return options_.clip_norm <= 0.0 || !last_step_clipped_;
}

absl::Status Trainer::ProvisionalUpdate(size_t i, double lr, ProvisionalState* saved) {
  if (options_.clip_norm > 0.0) {
    saved->value = model_->params()[i].value;
    saved->state = optimizer_.state()[i];
  }
  return UpdateParam(i, lr, 1.0f, nullptr, /*on_sequence=*/false);
}

int64_t Trainer::UndoProvisionalUpdates(std::vector<ProvisionalState>* saved,
                                        std::vector<char>* updated) {
  int64_t undone = 0;
  for (size_t i = 0; i < updated->size(); ++i) {
    if (!(*updated)[i]) continue;
    model_->params()[i].value = std::move((*saved)[i].value);
    optimizer_.state()[i] = std::move((*saved)[i].state);
    (*updated)[i] = 0;
    ++undone;
  }
  return undone;
}

absl::StatusOr<StepReport> Trainer::RunStep(
    const std::vector<TrainBatch>& micro_batches,
    const std::function<void(const TrainModel&)>& before_clip) {
  if (micro_batches.empty()) return absl::InvalidArgumentError("a step needs a batch");
  for (Parameter& p : model_->params()) p.ClearGrad();  // zero_grad(set_to_none=True)
  StepReport report;
  report.lr = ScheduledLr(options_, steps_done_);
  std::vector<Parameter>& params = model_->params();
  optimizer_.Prepare(params.size());
  // With the SSD tier the step's expert order starts as a prediction (every
  // expert of every layer) and becomes the real one as each layer's router
  // runs (step_access_plan.h).
  std::unique_ptr<StepAccessPlan> plan;
  size_t routing_batch = 0;  // the micro-batch whose forward runs
  const bool early_updates = EarlyExpertUpdates();
  if (tier_ != nullptr) {
    plan = std::make_unique<StepAccessPlan>(PredictedAccessPlan(micro_batches.size()));
    // Early updates need each expert's AdamW state in the last backward.
    if (early_updates) plan->NeedStateFromLastBackward();
    RETURN_IF_ERROR(tier_->BeginStep(plan->Sequence(), plan->state_from()));
    executor_->set_on_routed([&](const FeedForwardParams& p, const std::vector<int>& forward,
                                 const std::vector<int>& backward) {
      auto ids = [&](const std::vector<int>& experts) {
        std::vector<int> out;
        for (int e : experts) out.push_back(tier_->IdOf(p.experts[e].gate));
        return out;
      };
      const int layer = plan->LayerOf(tier_->IdOf(p.experts[0].gate));
      if (layer < 0) return;
      const size_t unchanged = plan->Route(routing_batch, layer, ids(forward), ids(backward));
      tier_->ReviseSequence(plan->Sequence(), unchanged, plan->state_from());
    });
  }
  struct EndStep {  // whatever happens: copies of the experts may be stale now
    ScheduledFeedForwardExecutor* executor;
    ~EndStep() {
      if (executor != nullptr) executor->MarkExpertWeightsChanged();
    }
  } end_step{executor_};
  struct EndTierStep {  // the tier's I/O thread goes idle whatever happens
    ExpertTier* tier;
    ScheduledFeedForwardExecutor* executor;
    ~EndTierStep() {
      if (tier == nullptr) return;
      executor->set_on_routed(nullptr);
      tier->EndStep();
    }
  } end_tier_step{tier_.get(), executor_};
  // An offloaded expert's gradient is final once the last micro-batch's
  // backward is done with it: its update overlaps the rest of backward. With
  // clipping that update is provisional (unclipped, the expert's weights and
  // AdamW state saved first): kept when the global norm says the clip
  // coefficient is exactly 1 (g * 1 == g, so the bits are plain training's),
  // else undone and redone after clipping with the rest.
  std::vector<char> updated(params.size(), 0);
  std::vector<ProvisionalState> saved(params.size());
  std::unique_ptr<OptimizerWorker> worker;
  const float scale = 1.0f / static_cast<float>(micro_batches.size());
  // With the SSD tier the last backward also takes each expert's squared
  // gradient norm while the expert is on the host (GradNorm reuses it).
  std::vector<double> grad_sq(params.size(), 0.0);
  std::vector<char> have_sq(params.size(), 0);
  std::mutex done_mu;  // the per-expert bookkeeping above, from the done callbacks
  const std::string step_name = absl::StrCat("step ", steps_done_);
  auto passes = std::make_unique<TraceRecorder::Span>(
      trace_.get(), step_name + ": forward + backward", TraceRecorder::kStep);
  for (size_t b = 0; b < micro_batches.size(); ++b) {
    const bool last = b + 1 == micro_batches.size();
    if (last && early_updates) {
      worker = std::make_unique<OptimizerWorker>([this, lr = report.lr, &saved](size_t i) {
        const absl::Status st = ProvisionalUpdate(i, lr, &saved[i]);
        if (TierId(i) >= 0) tier_->Unpin(TierId(i), /*dirty=*/false);  // the hold, below
        return st;
      });
    }
    if (last && (worker != nullptr || tier_ != nullptr)) {
      // Several training devices call it from their threads at once.
      executor_->set_on_expert_done([&](const MlpParams& e) {
        std::lock_guard<std::mutex> lock(done_mu);
        for (Parameter* w : {e.gate, e.up, e.down}) {
          const size_t i = static_cast<size_t>(w - params.data());
          if (!w->has_grad) continue;
          if (tier_ != nullptr) {
            grad_sq[i] = SquaredNorm(w->grad);
            have_sq[i] = 1;
          }
          if (worker == nullptr || updated[i]) continue;
          // A tier expert stays held on the host until its update is done
          // (off the sequence: the update is the same use as this one).
          if (tier_ != nullptr &&
              !tier_->Pin(TierId(i), ExpertTier::Need::kWeights, /*advance=*/false).ok()) {
            continue;  // updated after backward instead
          }
          updated[i] = 1;
          worker->Push(i);
          if (trace_ != nullptr) {  // the hand-off, on backward's thread
            const int64_t now = trace_->NowMicros();
            trace_->Record("queue AdamW " + w->name, TraceRecorder::kOptimizer, now, now);
          }
        }
      });
    }
    routing_batch = b;
    absl::StatusOr<LossBreakdown> loss =
        model_->Step(micro_batches[b], /*backward=*/true, scale, pool_.get());
    if (executor_ != nullptr) executor_->set_on_expert_done(nullptr);
    if (worker != nullptr) {  // drains: every early update is done
      absl::Status updates = worker->Close();
      worker.reset();
      if (!updates.ok() || !loss.ok()) {  // with clipping nothing stays half-updated
        if (options_.clip_norm > 0.0) UndoProvisionalUpdates(&saved, &updated);
        return updates.ok() ? loss.status() : updates;
      }
    }
    if (!loss.ok()) return loss.status();
    report.loss.total += loss->total * scale;
    report.loss.ce += loss->ce * scale;
    report.loss.aux += loss->aux * scale;
    report.loss.predicted_tokens += loss->predicted_tokens;
  }
  passes.reset();
  TraceRecorder::Span after(trace_.get(), step_name + ": norm, clipping, remaining updates",
                            TraceRecorder::kStep);
  if (plan != nullptr) ReviseTail(plan.get(), have_sq, updated);
  if (before_clip) {
    RETURN_IF_ERROR(HoldExpertsOnHost());  // it may read every gradient
    before_clip(*model_);
  }
  ASSIGN_OR_RETURN(const float total_norm, GradNorm(grad_sq, have_sq));
  report.grad_norm_before_clip = total_norm;
  if (options_.clip_norm > 0.0) {
    const float coef = static_cast<float>(options_.clip_norm) / (total_norm + 1e-6f);
    report.clip_coef = std::min(coef, 1.0f);
    for (size_t i = 0; i < params.size(); ++i) {
      if (!params[i].has_grad || TierId(i) >= 0) continue;  // tier experts: in UpdateParam
      for (float& g : params[i].grad) g *= report.clip_coef;
    }
    last_step_clipped_ = report.clip_coef != 1.0f;
    if (last_step_clipped_) {
      report.memory_schedule.redone_expert_updates = UndoProvisionalUpdates(&saved, &updated);
    }
  }
  report.memory_schedule.early_expert_updates =
      std::count(updated.begin(), updated.end(), static_cast<char>(1));
  for (size_t i = 0; i < params.size(); ++i) {
    if (!updated[i]) RETURN_IF_ERROR(UpdateParam(i, report.lr, report.clip_coef, pool_.get()));
  }
  ++steps_done_;
  return report;
}

absl::StatusOr<LossBreakdown> Trainer::Evaluate(const TrainBatch& batch) {
  return model_->Step(batch, /*backward=*/false, 1.0f, pool_.get());
}

}  // namespace expertd::train
