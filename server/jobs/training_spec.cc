#include "server/jobs/training_spec.h"

#include <cmath>
#include <cstdint>
#include <set>

#include "absl/strings/str_cat.h"
#include "models/checkpoint/expected_tensors.h"
#include "server/jobs/job_executor.h"

namespace expertd::server::jobs {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return WithJobErrorCode(absl::InvalidArgumentError(absl::StrCat(field, ": ", why)),
                          "invalid_spec");
}

// FNV-1a: a seed from the job id that no library version changes.
uint64_t StableHash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The proto's TrainingSchedule onto the engine's memory schedules
// (engine/train/train_schedule.h); unset fields mean plain training.
absl::Status ResolveSchedule(const v1::TrainingSchedule& s, ResolvedTrainingSpec* out) {
  const uint32_t c = s.moe_chunks();
  if (c != 0 && c != 1 && c != 2 && c != 4 && c != 8) {
    return Invalid("schedule.moe_chunks", absl::StrCat(c, " is not 0 (auto), 1, 2, 4 or 8"));
  }
  if (s.micro_batches() > 8) {
    return Invalid("schedule.micro_batches",
                   absl::StrCat(s.micro_batches(), " is not 0 or 1 (off) or 2..8"));
  }
  if (s.host_memory_bytes() > 0 && !s.offload_experts()) {
    return Invalid("schedule.host_memory_bytes",
                   "set, but schedule.offload_experts is off (the host budget is for offloaded "
                   "experts)");
  }
  if (s.host_memory_bytes() > static_cast<uint64_t>(INT64_MAX)) {
    return Invalid("schedule.host_memory_bytes", absl::StrCat(s.host_memory_bytes(), " is too large"));
  }
  train::TrainSchedule& m = out->train.memory_schedule;
  m.offload_experts = s.offload_experts();
  // The SSD tier's directory is the job's (the executor sets it).
  m.host_memory_bytes = static_cast<int64_t>(s.host_memory_bytes());
  m.moe_chunks = static_cast<int>(c);  // 0: the memory model chooses (1 when all fits)
  // Jobs never pick n by profiling: measured times would make a resumed job
  // differ from an uninterrupted one. 0 and 1 are both "off".
  m.micro_batches = s.micro_batches() <= 1 ? 1 : static_cast<int>(s.micro_batches());
  return absl::OkStatus();
}

// Every target module must adapt at least one weight of the served model
// (e.g. Mixtral's experts are w1/w2/w3, not gate_proj): refused here, at
// validation, rather than when the run attaches the adapters.
absl::Status CheckLoraTargetsMatch(const std::vector<std::string>& targets,
                                   const models::ModelConfig& config) {
  const std::vector<models::ExpectedTensor> tensors = models::ExpectedTensors(config);
  std::set<std::string> available;
  for (const std::string& m : train::LoraOptions().target_modules) {
    for (const models::ExpectedTensor& t : tensors) {
      if (train::IsLoraTarget(t.name, t.shape.size(), m)) available.insert(m);
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (available.count(targets[i]) > 0) continue;
    std::string have;
    for (const std::string& m : available) absl::StrAppend(&have, have.empty() ? "" : ", ", m);
    return Invalid(absl::StrCat("lora.target_modules[", i, "]"),
                   absl::StrCat("\"", targets[i], "\" matches no weight of the served model (",
                                models::ArchitectureName(config.architecture),
                                "); its targetable modules are ", have));
  }
  return absl::OkStatus();
}

absl::Status ResolveLora(const v1::FineTuneJobSpec& spec, const models::ModelConfig& config,
                         ResolvedTrainingSpec* out) {
  const v1::LoraSpec& l = spec.lora();
  if (out->scope != JobScope::kLora) {
    if (spec.has_lora() && (l.rank() != 0 || l.alpha() != 0 || l.target_modules_size() != 0)) {
      return Invalid("lora", "set, but the scope is not TRAIN_SCOPE_LORA");
    }
    return absl::OkStatus();
  }
  if (l.rank() > 1024) return Invalid("lora.rank", "must be at most 1024");
  out->lora.rank = l.rank() == 0 ? 8 : l.rank();
  if (l.alpha() < 0 || !std::isfinite(l.alpha())) {
    return Invalid("lora.alpha", "must be a positive number");
  }
  out->lora.alpha = l.alpha() == 0 ? 2.0 * out->lora.rank : l.alpha();
  out->lora.seed = out->seed;
  if (l.target_modules_size() > 0) {
    static const std::set<std::string> kKnown = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                                 "gate_proj", "up_proj", "down_proj", "w1",
                                                 "w2",        "w3"};
    out->lora.target_modules.clear();
    for (const std::string& m : l.target_modules()) {
      if (kKnown.count(m) == 0) {
        return Invalid("lora.target_modules", absl::StrCat("unknown module \"", m, "\""));
      }
      out->lora.target_modules.push_back(m);
    }
    return CheckLoraTargetsMatch(out->lora.target_modules, config);
  }
  return absl::OkStatus();  // the defaults: whichever of them the model has
}

absl::Status ResolveHyperparameters(const v1::Hyperparameters& h, const models::ModelConfig& config,
                                    ResolvedTrainingSpec* out) {
  if (h.has_n_epochs() && (h.n_epochs() < 1 || h.n_epochs() > 1000)) {
    return Invalid("hyperparameters.n_epochs", "must be 1..1000");
  }
  out->epochs = h.has_n_epochs() ? h.n_epochs() : 1;
  if (h.has_batch_size() && (h.batch_size() < 1 || h.batch_size() > 4096)) {
    return Invalid("hyperparameters.batch_size", "must be 1..4096");
  }
  out->batch_size = h.has_batch_size() ? h.batch_size() : 8;
  const double lr = h.has_learning_rate() ? h.learning_rate() : 1e-5;
  if (!(lr > 0) || !std::isfinite(lr)) {
    return Invalid("hyperparameters.learning_rate", "must be a positive number");
  }
  out->train.lr = lr;
  const double wd = h.has_weight_decay() ? h.weight_decay() : 0.01;
  if (!(wd >= 0) || !std::isfinite(wd)) {
    return Invalid("hyperparameters.weight_decay", "must be >= 0");
  }
  out->train.adamw.weight_decay = wd;
  const int64_t context =
      config.max_position_embeddings > 0 ? config.max_position_embeddings : 4096;
  if (h.has_max_seq_len() && (h.max_seq_len() < 2 || h.max_seq_len() > context)) {
    return Invalid("hyperparameters.max_seq_len",
                   absl::StrCat("must be 2..", context, " (the model's context)"));
  }
  out->max_seq_len = h.has_max_seq_len() ? h.max_seq_len() : context;
  const double clip = h.has_grad_clip_norm() ? h.grad_clip_norm() : 1.0;
  if (!(clip >= 0) || !std::isfinite(clip)) {
    return Invalid("hyperparameters.grad_clip_norm", "must be >= 0 (0: no clipping)");
  }
  out->train.clip_norm = clip;
  out->checkpoint_every_steps = h.has_checkpoint_every_steps() ? h.checkpoint_every_steps() : 0;
  const std::string sched = h.has_lr_scheduler() ? h.lr_scheduler() : "linear";
  if (sched == "constant") {
    out->train.schedule = train::LrSchedule::kConstant;
  } else if (sched == "linear") {
    out->train.schedule = train::LrSchedule::kLinear;
  } else if (sched == "cosine") {
    out->train.schedule = train::LrSchedule::kCosine;
  } else {
    return Invalid("hyperparameters.lr_scheduler",
                   absl::StrCat("\"", sched, "\" is not constant, linear or cosine"));
  }
  out->train.warmup_steps = h.has_warmup_steps() ? h.warmup_steps() : 0;
  if (h.has_gradient_accumulation_steps() &&
      (h.gradient_accumulation_steps() < 1 || h.gradient_accumulation_steps() > 1024)) {
    return Invalid("hyperparameters.gradient_accumulation_steps", "must be 1..1024");
  }
  out->accumulation = h.has_gradient_accumulation_steps() ? h.gradient_accumulation_steps() : 1;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResolvedTrainingSpec> ResolveTrainingSpec(const v1::FineTuneJobSpec& spec,
                                                         const models::ModelConfig& config,
                                                         const std::string& job_id) {
  // Pre-gate heads distil a softmax router's probabilities; DeepSeek's sigmoid
  // router has none to distil (full, experts and LoRA scopes train it).
  if (spec.scope() == v1::TRAIN_SCOPE_PREGATE &&
      config.router_scoring != models::RouterScoring::kSoftmax) {
    return WithJobErrorCode(
        absl::UnimplementedError("pre-gate training needs a softmax router (not DeepSeek-V3's)"),
        "unsupported_model");
  }
  ResolvedTrainingSpec out;
  switch (spec.scope()) {
    case v1::TRAIN_SCOPE_UNSPECIFIED:
    case v1::TRAIN_SCOPE_FULL:
      out.scope = JobScope::kFull;
      break;
    case v1::TRAIN_SCOPE_EXPERTS:
      out.scope = JobScope::kExperts;
      break;
    case v1::TRAIN_SCOPE_PREGATE:
      if (config.num_moe_layers() < 2) {
        return Invalid("scope", "TRAIN_SCOPE_PREGATE needs a model with two MoE layers or more");
      }
      out.scope = JobScope::kPregate;
      break;
    case v1::TRAIN_SCOPE_LORA:
      out.scope = JobScope::kLora;
      break;
    default:
      return Invalid("scope", absl::StrCat("unknown value ", spec.scope()));
  }
  out.train.scope = out.scope == JobScope::kExperts ? train::TrainScope::kExperts
                    : out.scope == JobScope::kLora  ? train::TrainScope::kLora
                                                    : train::TrainScope::kFull;
  out.seed = spec.has_seed() ? spec.seed() : StableHash(job_id);
  absl::Status st = ResolveSchedule(spec.schedule(), &out);
  if (st.ok()) st = ResolveHyperparameters(spec.hyperparameters(), config, &out);
  if (st.ok()) st = ResolveLora(spec, config, &out);
  if (!st.ok()) return st;
  return out;
}

nlohmann::json ResumeFingerprint(const ResolvedTrainingSpec& s) {
  return {{"scope", static_cast<int>(s.scope)},
          {"lr", s.train.lr},
          {"weight_decay", s.train.adamw.weight_decay},
          {"clip_norm", s.train.clip_norm},
          {"schedule", static_cast<int>(s.train.schedule)},
          {"warmup_steps", s.train.warmup_steps},
          {"lora_rank", s.scope == JobScope::kLora ? s.lora.rank : 0},
          {"lora_alpha", s.scope == JobScope::kLora ? s.lora.alpha : 0.0},
          {"lora_targets",
           s.scope == JobScope::kLora ? s.lora.target_modules : std::vector<std::string>{}},
          {"epochs", s.epochs},
          {"batch_size", s.batch_size},
          {"accumulation", s.accumulation},
          {"max_seq_len", s.max_seq_len},
          {"seed", s.seed}};
}

}  // namespace expertd::server::jobs
