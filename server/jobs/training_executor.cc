#include "server/jobs/training_executor.h"

#include <algorithm>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/train/data_stream.h"
#include "engine/train/lora.h"
#include "engine/train/pregate.h"
#include "engine/train/train_checkpoint.h"
#include "engine/train/train_model.h"
#include "engine/train/trainer.h"
#include "models/tokenizer/tokenizer.h"
#include "server/jobs/training_spec.h"

namespace expertd::server::jobs {
namespace {

using Level = v1::FineTuneJobEvent::Level;

absl::Status Coded(absl::Status status, absl::string_view code) {
  return status.ok() ? status : WithJobErrorCode(std::move(status), code);
}

struct JobData {
  train::Dataset train;
  std::optional<train::Dataset> validation;
};

// Weights, gradients and AdamW state (moments, fp32 masters) of `model`
// once it trains; activations are not counted.
uint64_t TrainingBytes(const train::TrainModel& model) {
  uint64_t bytes = 0;
  for (const train::Parameter& p : model.params()) {
    const uint64_t n = p.value.size();
    bytes += 4 * n;
    if (!p.trainable) continue;
    bytes += 12 * n;  // gradient, exp_avg, exp_avg_sq
    if (p.dtype != models::DType::kF32) bytes += 4 * n;
  }
  return bytes;
}

std::vector<std::vector<uint64_t>> ExpertLoad(train::TrainModel* model,
                                              const train::TrainBatch& batch) {
  std::vector<std::vector<uint64_t>> load;
  auto traces = model->TraceRouting(batch, nullptr);
  if (!traces.ok()) return load;
  for (const train::TrainModel::RouterTrace& t : *traces) {
    if (t.topk_ids.empty()) continue;  // a dense layer
    std::vector<uint64_t> counts(model->config().num_experts, 0);
    for (int32_t e : t.topk_ids) {
      if (e >= 0 && static_cast<size_t>(e) < counts.size()) ++counts[e];
    }
    load.push_back(std::move(counts));
  }
  return load;
}

class TrainingExecutor final : public JobExecutor {
 public:
  TrainingExecutor(TrainingExecutorOptions options, models::ModelConfig config,
                   std::unique_ptr<models::Tokenizer> tokenizer,
                   std::optional<chat_template::ChatFormatter> formatter)
      : options_(std::move(options)),
        config_(std::move(config)),
        tokenizer_(std::move(tokenizer)),
        formatter_(std::move(formatter)) {}

  absl::Status Validate(const JobRun& run) override {
    ASSIGN_OR_RETURN(ResolvedTrainingSpec spec, ResolveTrainingSpec(run.spec, config_, run.job_id));
    return LoadData(run, spec).status();
  }

  absl::Status Run(const JobRun& run, JobSink* sink) override {
    try {
      return RunOrFail(run, sink);
    } catch (const std::bad_alloc&) {  // a container could not grow: fail the job, not the daemon
      return WithJobErrorCode(absl::ResourceExhaustedError("out of memory while training"),
                              "out_of_memory");
    }
  }

 private:
  train::DatasetOptions DataOptions(const ResolvedTrainingSpec& spec) const {
    train::DatasetOptions o;
    o.tokenizer = tokenizer_.get();
    if (formatter_.has_value() && formatter_->has_template()) {
      o.chat = MakeChatRenderer(&*formatter_);
      o.stop_strings.push_back(formatter_->eos_token());
    }
    for (int32_t id : config_.eos_token_ids) {
      const std::string* token = tokenizer_ != nullptr ? tokenizer_->IdToToken(id) : nullptr;
      if (token != nullptr) o.stop_strings.push_back(*token);
    }
    o.vocab_size = config_.vocab_size;
    o.eos_token_id = config_.eos_token_ids.empty() ? -1 : config_.eos_token_ids.front();
    o.max_seq_len = spec.max_seq_len;
    return o;
  }

  absl::StatusOr<JobData> LoadData(const JobRun& run, const ResolvedTrainingSpec& spec) const {
    const train::DatasetOptions o = DataOptions(spec);
    JobData data;
    auto train_data = train::LoadDataset(env(), run.training_file_path, o);
    if (!train_data.ok()) return Coded(train_data.status(), "invalid_training_file");
    data.train = *std::move(train_data);
    if (!run.validation_file_path.empty()) {
      auto validation = train::LoadDataset(env(), run.validation_file_path, o);
      if (!validation.ok()) return Coded(validation.status(), "invalid_training_file");
      data.validation = *std::move(validation);
    }
    return data;
  }

  Env* env() const { return options_.env != nullptr ? options_.env : Env::Default(); }
  Clock* clock() const {
    return options_.clock != nullptr ? options_.clock : static_cast<Clock*>(RealClock::Get());
  }

  train::DataStreamOptions StreamOptions(const ResolvedTrainingSpec& spec) const {
    train::DataStreamOptions o;
    o.max_seq_len = spec.max_seq_len;
    o.rows_per_micro_batch = spec.batch_size;
    o.micro_batches_per_step = spec.accumulation;
    o.seed = spec.seed;
    o.pad_id = config_.pad_token_id >= 0 && config_.pad_token_id < config_.vocab_size
                   ? config_.pad_token_id
                   : 0;
    return o;
  }

  std::string FineTunedName(const JobRun& run) const {
    return absl::StrCat(options_.model_name, ":ft-",
                        run.spec.suffix().empty() ? run.job_id : run.spec.suffix());
  }

  absl::StatusOr<std::unique_ptr<train::TrainModel>> LoadModel(
      const JobRun& run, const ResolvedTrainingSpec& spec) const {
    models::CheckpointOptions co;
    co.env = env();
    const bool lora = spec.scope == JobScope::kLora;
    const bool resume = run.resume_from.has_value();
    const std::string dir = resume && !lora ? run.resume_from->path : options_.model_dir;
    auto model = train::TrainModel::Load(dir, co);
    if (!model.ok()) return Coded(model.status(), resume ? "resume_failed" : "invalid_model");
    if (lora && resume) {
      RETURN_IF_ERROR(
          Coded(train::LoadLoraAdapter(run.resume_from->path + "/adapter", model->get()),
                "resume_failed"));
    } else if (lora) {
      RETURN_IF_ERROR(Coded(train::AttachLora(spec.lora, model->get()), "invalid_spec"));
    }
    return model;
  }

  absl::Status RunOrFail(const JobRun& run, JobSink* sink) {
    ASSIGN_OR_RETURN(ResolvedTrainingSpec spec, ResolveTrainingSpec(run.spec, config_, run.job_id));
    // The daemon's training device budget; the memory schedules plan against it.
    spec.train.memory_schedule.device_memory_bytes =
        static_cast<int64_t>(options_.device_memory_bytes);
    // The SSD tier's file (past schedule.host_memory_bytes) lives in the job's
    // directory; the trainer removes it when the job ends (a killed daemon's
    // leftover is overwritten on resume).
    spec.train.memory_schedule.ssd_dir = run.job_dir;
    if (spec.train.memory_schedule.host_memory_bytes > 0) {
      RETURN_IF_ERROR(Coded(CreateDirs(env(), run.job_dir), "training_failed"));
    }
    ASSIGN_OR_RETURN(JobData data, LoadData(run, spec));
    const train::DataStream stream(data.train.examples, StreamOptions(spec));
    std::optional<train::DataStream> validation;
    if (data.validation.has_value()) {
      validation.emplace(data.validation->examples, StreamOptions(spec));
    }
    spec.train.total_steps = spec.epochs * stream.steps_per_epoch();
    spec.train.threads = std::max(1, options_.max_threads);
    sink->Event(
        v1::FineTuneJobEvent::LEVEL_INFO,
        absl::StrCat("validated ", data.train.examples.size(), " examples (", data.train.tokens,
                     " tokens, ", data.train.truncated, " cut to max_seq_len ", spec.max_seq_len,
                     ") packed into ", stream.rows(), " rows; ", spec.train.total_steps, " steps"));
    if (spec.scope == JobScope::kPregate) return RunPregate(run, spec, stream, validation, sink);
    return Train(run, spec, data, stream, validation, sink);
  }

  absl::Status Train(const JobRun& run, const ResolvedTrainingSpec& spec, const JobData& data,
                     const train::DataStream& stream,
                     const std::optional<train::DataStream>& validation, JobSink* sink);
  absl::StatusOr<train::TrainingProgress> Resume(const JobRun& run, const nlohmann::json& extra,
                                                 train::TrainModel* model, train::Trainer* trainer,
                                                 JobSink* sink);
  absl::Status Checkpoint(const JobRun& run, const ResolvedTrainingSpec& spec,
                          const train::TrainModel& model, train::Trainer* trainer,
                          const train::TrainingProgress& progress, JobSink* sink);
  absl::Status PregateCheckpoint(const JobRun& run, int64_t step,
                                 const train::PregateHeads& heads, JobSink* sink);
  absl::Status RunPregate(const JobRun& run, const ResolvedTrainingSpec& spec,
                          const train::DataStream& stream,
                          const std::optional<train::DataStream>& validation, JobSink* sink);

  const TrainingExecutorOptions options_;
  const models::ModelConfig config_;
  const std::unique_ptr<models::Tokenizer> tokenizer_;
  const std::optional<chat_template::ChatFormatter> formatter_;
};

// An event when the memory schedule places the experts differently from the
// last step (resident / host / host+ssd), with the engine's reason.
void ReportPlacement(const train::ScheduleReport& r, std::string* last, JobSink* sink) {
  if (r.expert_placement.empty() || r.expert_placement == *last) return;
  *last = r.expert_placement;
  sink->Event(v1::FineTuneJobEvent::LEVEL_INFO,
              absl::StrCat("experts ", r.expert_placement,
                           r.placement_reason.empty() ? "" : ": ", r.placement_reason));
}

// MPMoE: how the micro-batches' activations were restored, when the per-layer
// choice changes, with that step's traffic.
void ReportMicroBatches(const train::ScheduleReport& r, std::string* last, JobSink* sink) {
  if (std::none_of(r.micro_batches.begin(), r.micro_batches.end(), [](int n) { return n > 1; })) {
    return;
  }
  const std::string choice =
      absl::StrCat("micro-batches ", absl::StrJoin(r.micro_batches, ","), " restored by ",
                   absl::StrJoin(r.activation_restore, ","));
  if (choice == *last) return;
  *last = choice;
  sink->Event(v1::FineTuneJobEvent::LEVEL_INFO,
              absl::StrCat(choice, ": ", r.offloaded_activation_bytes,
                           " activation bytes offloaded to the host and ", r.recomputed_flops,
                           " FLOPs recomputed in the step"));
}

// The SSD tier needs room for two experts' training state on the host.
absl::Status CheckHostBudget(const ResolvedTrainingSpec& spec, const train::TrainModel& model) {
  const int64_t budget = spec.train.memory_schedule.host_memory_bytes;
  const int64_t needed = train::Trainer::MinHostMemoryBytes(model);
  if (budget <= 0 || budget >= needed) return absl::OkStatus();
  return WithJobErrorCode(
      absl::InvalidArgumentError(absl::StrCat(
          "schedule.host_memory_bytes: ", budget, " bytes do not hold two experts' training "
          "state (weights, gradients, AdamW state) for the SSD tier; at least ", needed,
          " bytes are needed")),
      "invalid_spec");
}

JobProgressUpdate StepUpdate(const train::StepReport& report,
                             const train::TrainingProgress& progress, int64_t total_steps,
                             int64_t steps_per_epoch, int64_t nanos, uint64_t memory) {
  JobProgressUpdate u;
  u.step = progress.step;
  u.total_steps = total_steps;
  u.epoch = static_cast<double>(progress.step) / steps_per_epoch;
  u.train_loss = report.loss.ce;
  u.learning_rate = report.lr;
  u.grad_norm = report.grad_norm_before_clip;
  u.tokens_per_second = nanos > 0 ? report.loss.predicted_tokens / (nanos * 1e-9) : 0.0;
  u.trained_tokens = progress.trained_tokens;
  u.memory_bytes = memory;
  return u;
}

absl::StatusOr<double> ValidationLoss(train::Trainer* trainer, const train::DataStream& stream) {
  double weighted = 0;
  int64_t tokens = 0;
  for (const train::TrainBatch& batch : stream.AllInOrder()) {
    ASSIGN_OR_RETURN(train::LossBreakdown loss, trainer->Evaluate(batch));
    weighted += static_cast<double>(loss.ce) * loss.predicted_tokens;
    tokens += loss.predicted_tokens;
  }
  return tokens > 0 ? weighted / tokens : 0.0;
}

absl::StatusOr<train::TrainingProgress> TrainingExecutor::Resume(const JobRun& run,
                                                                 const nlohmann::json& extra,
                                                                 train::TrainModel* model,
                                                                 train::Trainer* trainer,
                                                                 JobSink* sink) {
  auto progress =
      train::RestoreTrainingState(env(), run.resume_from->path, model, &trainer->optimizer());
  if (!progress.ok()) return Coded(progress.status(), "resume_failed");
  if (progress->extra.value("spec", nlohmann::json()) != extra["spec"] ||
      progress->extra.value("data", nlohmann::json()) != extra["data"]) {
    return WithJobErrorCode(
        absl::FailedPreconditionError(absl::StrCat(
            run.resume_from->path, " was written by a different spec or dataset; cannot resume")),
        "checkpoint_mismatch");
  }
  if (progress->extra.value("threads", 0) != extra["threads"]) {
    sink->Event(
        v1::FineTuneJobEvent::LEVEL_WARNING,
        absl::StrCat("the training thread cap changed since the checkpoint (",
                     progress->extra.value("threads", 0), " -> ", extra["threads"].get<int>(),
                     "): the result may differ from an uninterrupted run in the last bits"));
  }
  progress->extra = extra;
  trainer->RestoreStepsDone(progress->step);
  sink->Event(v1::FineTuneJobEvent::LEVEL_INFO,
              absl::StrCat("resumed at step ", progress->step, " from ", run.resume_from->path));
  return progress;
}

absl::Status TrainingExecutor::Train(const JobRun& run, const ResolvedTrainingSpec& spec,
                                     const JobData& data, const train::DataStream& stream,
                                     const std::optional<train::DataStream>& validation,
                                     JobSink* sink) {
  ASSIGN_OR_RETURN(std::unique_ptr<train::TrainModel> model, LoadModel(run, spec));
  train::Trainer trainer(model.get(), spec.train);  // marks the scope's parameters trainable
  RETURN_IF_ERROR(CheckHostBudget(spec, *model));
  const uint64_t memory = TrainingBytes(*model);
  if (options_.memory_limit_bytes > 0 && memory > options_.memory_limit_bytes) {
    return WithJobErrorCode(absl::ResourceExhaustedError(absl::StrCat(
                                "training needs ", memory,
                                " bytes for weights, gradients and optimizer state; the "
                                "limit is ",
                                options_.memory_limit_bytes)),
                            "out_of_memory");
  }
  const nlohmann::json extra = {
      {"spec", ResumeFingerprint(spec)},
      {"data", {{"examples", data.train.examples.size()}, {"tokens", data.train.tokens}}},
      {"threads", spec.train.threads}};
  train::TrainingProgress progress;
  progress.seed = spec.seed;
  progress.extra = extra;
  if (run.resume_from.has_value()) {
    ASSIGN_OR_RETURN(progress, Resume(run, extra, model.get(), &trainer, sink));
  }
  const int64_t total = spec.train.total_steps;
  std::string placement;      // the experts' placement last reported
  std::string micro_batches;  // and the micro-batches' restore
  while (progress.step < total) {
    if (sink->StopRequested()) {
      return absl::CancelledError(absl::StrCat("stopped at step ", progress.step));
    }
    const int64_t start = clock()->NowNanos();
    const std::vector<train::TrainBatch> batches = stream.NextStep(&progress.cursor);
    auto report = trainer.Step(batches);
    if (!report.ok()) return Coded(report.status(), "training_failed");
    ++progress.step;
    progress.trained_tokens += report->loss.predicted_tokens;
    ReportPlacement(report->memory_schedule, &placement, sink);
    ReportMicroBatches(report->memory_schedule, &micro_batches, sink);
    JobProgressUpdate u = StepUpdate(*report, progress, total, stream.steps_per_epoch(),
                                     clock()->NowNanos() - start, memory);
    const bool checkpoint =
        progress.step == total ||
        (spec.checkpoint_every_steps > 0 ? progress.step % spec.checkpoint_every_steps == 0
                                         : progress.cursor.position == 0);
    const bool load = progress.step == 1 || progress.step % 10 == 0;
    if (load || checkpoint) {  // they read whole experts: none may be in the SSD tier
      absl::Status held = trainer.HoldExpertsOnHost();
      if (!held.ok()) return Coded(held, "training_failed");
    }
    if (load) u.expert_load = ExpertLoad(model.get(), batches[0]);
    if (checkpoint && validation.has_value()) {
      auto loss = ValidationLoss(&trainer, *validation);
      if (!loss.ok()) return Coded(loss.status(), "training_failed");
      u.validation_loss = *loss;
    }
    sink->Progress(u);
    if (checkpoint) RETURN_IF_ERROR(Checkpoint(run, spec, *model, &trainer, progress, sink));
  }
  return absl::OkStatus();
}

absl::Status TrainingExecutor::Checkpoint(const JobRun& run, const ResolvedTrainingSpec& spec,
                                          const train::TrainModel& model, train::Trainer* trainer,
                                          const train::TrainingProgress& progress, JobSink* sink) {
  const std::string parent = run.job_dir + "/checkpoints";
  const std::string dir = absl::StrCat(parent, "/step-", progress.step);
  // The checkpoints directory's own entry must survive a crash too.
  absl::Status st = CreateDirs(env(), parent);
  if (st.ok()) st = env()->SyncDir(run.job_dir);
  if (st.ok()) {
    train::CheckpointSource source{options_.model_dir,
                                   spec.scope == JobScope::kLora ? &spec.lora : nullptr,
                                   options_.model_name};
    st = train::WriteTrainingCheckpoint(env(), model, trainer->optimizer(), progress, source, dir);
  }
  if (!st.ok()) {
    return Coded(st, absl::IsResourceExhausted(st) ? "disk_full" : "checkpoint_write_failed");
  }
  CheckpointRecord record;
  record.id = absl::StrCat("ckpt-", run.job_id, "-", progress.step);
  record.job_id = run.job_id;
  record.path = dir;
  record.step = progress.step;
  record.model_name = FineTunedName(run);
  st = sink->CheckpointWritten(record);
  if (!st.ok())
    return JobErrorCodeOf(st) == "internal_error" ? Coded(st, "checkpoint_write_failed") : st;
  sink->Event(v1::FineTuneJobEvent::LEVEL_INFO,
              absl::StrCat("checkpoint ", record.id, " at step ", progress.step, ": ", dir));
  return absl::OkStatus();
}

absl::Status TrainingExecutor::PregateCheckpoint(const JobRun& run, int64_t step,
                                                 const train::PregateHeads& heads,
                                                 JobSink* sink) {
  const std::string parent = run.job_dir + "/checkpoints";
  const std::string dir = absl::StrCat(parent, "/step-", step);
  // The checkpoints directory's own entry must survive a crash too.
  absl::Status st = CreateDirs(env(), parent);
  if (st.ok()) st = env()->SyncDir(run.job_dir);
  if (st.ok()) st = train::RemoveTree(env(), dir + ".partial");
  if (st.ok()) st = train::WritePregateCheckpoint(options_.model_dir, heads, dir + ".partial");
  if (st.ok()) st = train::RemoveTree(env(), dir);
  if (st.ok()) st = env()->RenameFile(dir + ".partial", dir);
  if (st.ok()) st = env()->SyncDir(parent);
  if (!st.ok()) {
    return Coded(st, absl::IsResourceExhausted(st) ? "disk_full" : "checkpoint_write_failed");
  }
  CheckpointRecord record{absl::StrCat("ckpt-", run.job_id, "-", step), run.job_id, dir,
                          static_cast<uint64_t>(step), FineTunedName(run)};
  st = sink->CheckpointWritten(record);
  if (!st.ok())
    return JobErrorCodeOf(st) == "internal_error" ? Coded(st, "checkpoint_write_failed") : st;
  return absl::OkStatus();
}

// Pre-gate distillation is full-batch and draws no randomness, so a job
// interrupted after checkpoint N restarts from step 0 and reaches bitwise the
// heads of an uninterrupted run (same thread cap); it skips the checkpoints
// it already recorded. Resuming mid-way would need the AdamW moments of the
// heads as well, for a run that costs little next to the routing trace.
absl::Status TrainingExecutor::RunPregate(const JobRun& run, const ResolvedTrainingSpec& spec,
                                          const train::DataStream& stream,
                                          const std::optional<train::DataStream>& validation,
                                          JobSink* sink) {
  if (sink->StopRequested()) return absl::CancelledError("stopped before training");
  models::CheckpointOptions co;
  co.env = env();
  auto model = train::TrainModel::Load(options_.model_dir, co);
  if (!model.ok()) return Coded(model.status(), "invalid_model");
  // Full-batch distillation: 200 steps per epoch; the job's learning rate
  // only when the spec sets one (the LM default, 1e-5, is far too small).
  train::PregateOptions po;
  po.steps = 200 * spec.epochs;
  if (run.spec.hyperparameters().has_learning_rate()) po.lr = spec.train.lr;
  const int64_t every = spec.checkpoint_every_steps > 0 ? spec.checkpoint_every_steps : 200;
  const int64_t recorded = run.resume_from.has_value() ? run.resume_from->step : 0;
  if (recorded > 0) {
    sink->Event(v1::FineTuneJobEvent::LEVEL_INFO,
                absl::StrCat("pre-gate training restarts from step 0 (checkpoint at step ",
                             recorded, "): it is deterministic, so the result is bitwise an "
                             "uninterrupted run's; recorded checkpoints are not written again"));
  }
  const std::vector<train::TrainBatch> batches = stream.AllInOrder();
  int64_t tokens = 0;
  for (const train::TrainBatch& b : batches) tokens += b.batch * b.seq_len;
  const int64_t start = clock()->NowNanos();
  auto update = [&](int64_t step, const std::vector<float>& losses) {
    JobProgressUpdate u;
    u.step = step;
    u.total_steps = po.steps;
    u.epoch = static_cast<double>(step) / 200;
    u.train_loss = losses.empty() ? 0.0 : losses.back();
    u.learning_rate = po.lr;
    const double seconds = static_cast<double>(clock()->NowNanos() - start) * 1e-9;
    u.trained_tokens = tokens * step;
    u.tokens_per_second = seconds > 0 ? u.trained_tokens / seconds : 0.0;
    return u;
  };
  // Between steps: stop requests, and the intermediate checkpoints.
  auto on_step = [&](int64_t step,
                     const std::function<train::PregateHeads()>& snapshot) -> absl::Status {
    if (step == po.steps) return absl::OkStatus();  // the last one follows the evaluation
    if (step % every == 0 && step > recorded) {
      const train::PregateHeads heads = snapshot();
      sink->Progress(update(step, heads.step_losses));
      RETURN_IF_ERROR(PregateCheckpoint(run, step, heads, sink));
    }
    if (sink->StopRequested()) return absl::CancelledError(absl::StrCat("stopped at step ", step));
    return absl::OkStatus();
  };
  auto heads = train::TrainPregates(model->get(), batches, po, nullptr, on_step);
  if (!heads.ok()) {
    if (absl::IsCancelled(heads.status()) || JobErrorCodeOf(heads.status()) != "internal_error") {
      return heads.status();
    }
    return Coded(heads.status(), "invalid_spec");
  }
  const std::vector<train::TrainBatch> held_out =
      validation.has_value() ? validation->AllInOrder() : batches;
  auto speculative = train::EvaluatePregates(model->get(), nullptr, held_out, nullptr);
  auto trained = train::EvaluatePregates(model->get(), &*heads, held_out, nullptr);
  if (speculative.ok() && trained.ok()) {
    sink->Event(
        v1::FineTuneJobEvent::LEVEL_INFO,
        absl::StrFormat("next-layer expert prediction on %s data: trained pre-gate "
                        "precision %.4f recall %.4f; speculative precision %.4f recall %.4f",
                        validation.has_value() ? "validation" : "training", trained->precision,
                        trained->recall, speculative->precision, speculative->recall));
  }
  JobProgressUpdate u = update(po.steps, heads->step_losses);
  u.epoch = spec.epochs;
  sink->Progress(u);
  if (po.steps <= recorded) return absl::OkStatus();  // recorded before the restart
  return PregateCheckpoint(run, po.steps, *heads, sink);
}

}  // namespace

train::ChatRenderer MakeChatRenderer(const chat_template::ChatFormatter* formatter) {
  return [formatter](const nlohmann::ordered_json& messages,
                     bool add_generation_prompt) -> absl::StatusOr<std::string> {
    chat_template::ChatRequest request;
    request.messages = messages;
    request.add_generation_prompt = add_generation_prompt;
    return formatter->Render(request);
  };
}

absl::StatusOr<std::unique_ptr<JobExecutor>> NewTrainingExecutor(
    const TrainingExecutorOptions& options) {
  auto config = models::LoadModelConfig(options.model_dir + "/config.json");
  if (!config.ok()) return Coded(config.status(), "invalid_model");
  absl::Status generation =
      models::ApplyGenerationConfig(options.model_dir + "/generation_config.json", &*config);
  if (!generation.ok()) return Coded(generation, "invalid_model");
  std::unique_ptr<models::Tokenizer> tokenizer;
  const std::string tokenizer_path = options.model_dir + "/tokenizer.json";
  Env* env = options.env != nullptr ? options.env : Env::Default();
  if (FileExists(env, tokenizer_path)) {
    auto loaded = models::Tokenizer::LoadFromFile(tokenizer_path);
    if (!loaded.ok()) return Coded(loaded.status(), "invalid_model");
    tokenizer = *std::move(loaded);
  }
  std::optional<chat_template::ChatFormatter> formatter;
  if (FileExists(env, options.model_dir + "/tokenizer_config.json")) {
    auto loaded = chat_template::ChatFormatter::FromModelDir(options.model_dir);
    if (!loaded.ok()) return Coded(loaded.status(), "invalid_model");
    formatter = *std::move(loaded);
  }
  return std::unique_ptr<JobExecutor>(new TrainingExecutor(
      options, *std::move(config), std::move(tokenizer), std::move(formatter)));
}

}  // namespace expertd::server::jobs
