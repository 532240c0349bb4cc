#include "server/jobs/job_spec.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::server::jobs {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("spec.", field, ": ", why));
}

absl::Status CheckHyperparameters(const v1::Hyperparameters& h) {
  if (h.has_n_epochs() && (h.n_epochs() < 1 || h.n_epochs() > 10000)) {
    return Bad("hyperparameters.n_epochs",
               absl::StrCat("must be in [1, 10000], got ", h.n_epochs()));
  }
  if (h.has_batch_size() && (h.batch_size() < 1 || h.batch_size() > 65536)) {
    return Bad("hyperparameters.batch_size",
               absl::StrCat("must be in [1, 65536], got ", h.batch_size()));
  }
  if (h.has_learning_rate() && !(std::isfinite(h.learning_rate()) && h.learning_rate() > 0)) {
    return Bad("hyperparameters.learning_rate",
               absl::StrCat("must be a finite number > 0, got ", h.learning_rate()));
  }
  if (h.has_weight_decay() && !(std::isfinite(h.weight_decay()) && h.weight_decay() >= 0)) {
    return Bad("hyperparameters.weight_decay",
               absl::StrCat("must be a finite number >= 0, got ", h.weight_decay()));
  }
  if (h.has_max_seq_len() && (h.max_seq_len() < 2 || h.max_seq_len() > (1u << 20))) {
    return Bad("hyperparameters.max_seq_len",
               absl::StrCat("must be in [2, 1048576], got ", h.max_seq_len()));
  }
  if (h.has_grad_clip_norm() && !(std::isfinite(h.grad_clip_norm()) && h.grad_clip_norm() >= 0)) {
    return Bad(
        "hyperparameters.grad_clip_norm",
        absl::StrCat("must be a finite number >= 0 (0: no clipping), got ", h.grad_clip_norm()));
  }
  if (h.has_checkpoint_every_steps() && h.checkpoint_every_steps() < 1) {
    return Bad("hyperparameters.checkpoint_every_steps", "must be >= 1 when set");
  }
  if (h.has_lr_scheduler() && h.lr_scheduler() != "constant" && h.lr_scheduler() != "linear" &&
      h.lr_scheduler() != "cosine") {
    return Bad("hyperparameters.lr_scheduler",
               absl::StrCat("must be constant, linear or cosine, got '", h.lr_scheduler(), "'"));
  }
  if (h.has_gradient_accumulation_steps() &&
      (h.gradient_accumulation_steps() < 1 || h.gradient_accumulation_steps() > 4096)) {
    return Bad("hyperparameters.gradient_accumulation_steps",
               absl::StrCat("must be in [1, 4096], got ", h.gradient_accumulation_steps()));
  }
  return absl::OkStatus();
}

absl::Status CheckLora(const v1::FineTuneJobSpec& spec) {
  const v1::LoraSpec& lora = spec.lora();
  const bool lora_set = lora.rank() != 0 || lora.alpha() != 0 || lora.target_modules_size() > 0;
  if (spec.scope() != v1::TRAIN_SCOPE_LORA) {
    if (lora_set) return Bad("lora", "set only with scope TRAIN_SCOPE_LORA");
    return absl::OkStatus();
  }
  if (lora.rank() > 4096)
    return Bad("lora.rank", absl::StrCat("must be <= 4096, got ", lora.rank()));
  if (!(std::isfinite(lora.alpha()) && lora.alpha() >= 0)) {
    return Bad("lora.alpha", absl::StrCat("must be a finite number >= 0, got ", lora.alpha()));
  }
  static constexpr const char* kModules[] = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                             "gate_proj", "up_proj", "down_proj", "w1",
                                             "w2",        "w3"};
  for (int i = 0; i < lora.target_modules_size(); ++i) {
    const std::string& m = lora.target_modules(i);
    bool known = false;
    for (const char* k : kModules) known = known || m == k;
    if (!known) {
      return Bad(absl::StrCat("lora.target_modules[", i, "]"),
                 absl::StrCat("unknown module '", m,
                              "' (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                              "down_proj; Mixtral's experts: w1, w2, w3)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSchedule(const v1::TrainingSchedule& s) {
  const uint32_t c = s.moe_chunks();
  if (c != 0 && c != 1 && c != 2 && c != 4 && c != 8) {
    return Bad("schedule.moe_chunks", absl::StrCat("must be 0, 1, 2, 4 or 8, got ", c));
  }
  if (s.micro_batches() > 8) {
    return Bad("schedule.micro_batches",
               absl::StrCat("must be in [0, 8], got ", s.micro_batches()));
  }
  if (s.host_memory_bytes() > 0 && !s.offload_experts()) {
    return Bad("schedule.host_memory_bytes", "needs schedule.offload_experts");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const v1::FineTuneJobSpec& spec) {
  if (spec.training_file().empty()) return Bad("training_file", "required");
  if (!v1::TrainScope_IsValid(spec.scope())) {
    return Bad("scope", absl::StrCat("unknown scope ", static_cast<int>(spec.scope())));
  }
  RETURN_IF_ERROR(CheckHyperparameters(spec.hyperparameters()));
  RETURN_IF_ERROR(CheckLora(spec));
  RETURN_IF_ERROR(CheckSchedule(spec.schedule()));
  if (spec.suffix().size() > 64) return Bad("suffix", "at most 64 characters");
  for (char ch : spec.suffix()) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' &&
        ch != '.') {
      return Bad("suffix",
                 absl::StrCat("only letters, digits, '-', '_' and '.', got '", spec.suffix(), "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace expertd::server::jobs
