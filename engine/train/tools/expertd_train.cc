// expertd-train: runs training steps on a model directory, without the daemon.
//
//   expertd-train --model=DIR --batch=BATCH.json --steps=N --lr=1e-3 --weight_decay=0.01 \
//                 --clip_norm=1.0 [--grads_out=GRADS.safetensors] [--threads=N]
//                 [--scope=full|experts|lora] [--schedule=constant|linear|cosine]
//                 [--warmup_steps=N] [--weights=model.bf16.safetensors]
//                 [--weights_out=MODEL.safetensors]
//                 [--lora_rank=8 --lora_alpha=16 --seed=0 --lora_out=DIR]
//                 [--scope=pregate --eval_batch=HELD_OUT.json --pregate_out=DIR]
//                 [--rows_per_step=N]
//
// BATCH.json is {"input_ids": [[...], ...]} (equal-length sequences); labels
// are the input ids, shifted inside as Hugging Face does. Every step trains on
// that same batch with AdamW(betas 0.9/0.999, eps 1e-8) and global-norm
// clipping; with --rows_per_step=N, step s trains on the N rows starting at row
// s * N (mod the row count, wrapping around), so a tokenized corpus cut into
// rows trains as a stream of mini-batches, and the final loss is that of the
// last step's rows. Prints ONE JSON object on stdout:
//   {"steps": [{"loss_total", "ce_loss", "aux_loss", "grad_norm_before_clip"}, ...],
//    "loss_after_final_step": x}
// --grads_out writes the first step's gradients (before clipping) as fp32
// safetensors under the Hugging Face parameter names; parameters without a
// gradient are absent. --weights picks the weights file (bf16/fp16 weights
// train on fp32 master copies, rounded back after every step). --weights_out
// writes the weights after the last step (as fp32 values, Hugging Face names). --scope=lora trains
// fresh LoRA adapters on the attention and expert projections only; --lora_out writes them in the
// PEFT layout (adapter_config.json + adapter_model.safetensors). Memory schedules
// (--offload_experts, --moe_chunks, --micro_batches with --activation_restore,
// --device_memory_bytes, --host_memory_bytes with --ssd_dir; docs/training.md) and
// --train_devices=N (the experts over N CPU virtual devices, placed per step; with
// --offload_experts each device uploads its experts through its own slots and keeps its pinned
// ones, --device_memory_bytes per device; not with the SSD tier or --micro_batches) compute the
// same function; with any of them the JSON gains "schedule": one object per step (placement and
// why, peak device bytes, uploads, SSD tier bytes read / written and waits, recomputed FLOPs or
// offloaded activation bytes, chosen chunks, micro-batches and restore strategies; with N > 1
// each MoE layer's device imbalance and pinned experts, the placement's modelled upload bytes
// and seconds beside the measured ones, and offloaded each device's peak bytes and cached
// experts). A step that
// does not fit the device fails with the ResourceExhausted message naming what did not fit.
// Errors go to stderr with exit status 1 (2: bad usage).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "base/flags.h"
#include "base/status_macros.h"
#include "engine/train/lora.h"
#include "engine/train/pregate.h"
#include "engine/train/trainer.h"
#include "models/safetensors/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace expertd {
namespace {

struct Options {
  std::string model, batch, grads_out, weights_out, weights;
  std::string scope = "full", schedule = "constant", lora_out, eval_batch, pregate_out;
  int64_t steps = 1, threads = 1, warmup_steps = 0, lora_rank = 8, seed = 0, rows_per_step = 0;
  // Memory schedules (train_schedule.h).
  bool offload_experts = false;
  int64_t moe_chunks = 1, micro_batches = 1, device_memory_bytes = 0, host_memory_bytes = 0;
  int64_t train_devices = 1;
  std::string activation_restore = "auto";
  std::string ssd_dir, trace_out;
  double lr = 1e-3, weight_decay = 0.01, clip_norm = 1.0, lora_alpha = 16.0;
};

absl::StatusOr<train::TrainBatch> ReadBatch(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("--batch: cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("input_ids") ||
      !j["input_ids"].is_array() || j["input_ids"].empty()) {
    return absl::InvalidArgumentError(path + ": expected {\"input_ids\": [[...], ...]}");
  }
  train::TrainBatch batch;
  for (const nlohmann::json& seq : j["input_ids"]) {
    if (!seq.is_array() || seq.empty()) {
      return absl::InvalidArgumentError(path + ": input_ids must hold non-empty arrays");
    }
    if (batch.batch > 0 && static_cast<int64_t>(seq.size()) != batch.seq_len) {
      return absl::InvalidArgumentError(path + ": every sequence must have the same length");
    }
    batch.seq_len = seq.size();
    for (const nlohmann::json& id : seq) {
      if (!id.is_number_integer()) {
        return absl::InvalidArgumentError(path + ": token ids must be integers");
      }
      batch.input_ids.push_back(id.get<int32_t>());
    }
    ++batch.batch;
  }
  return batch;
}

// Rows [first, first + rows) of `all`, wrapping around at the end.
train::TrainBatch SliceRows(const train::TrainBatch& all, int64_t first, int64_t rows) {
  train::TrainBatch b;
  b.batch = rows;
  b.seq_len = all.seq_len;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = (first + r) % all.batch;
    b.input_ids.insert(b.input_ids.end(), all.input_ids.begin() + row * all.seq_len,
                       all.input_ids.begin() + (row + 1) * all.seq_len);
  }
  return b;
}

absl::StatusOr<train::TrainOptions> MakeOptions(const Options& o) {
  train::TrainOptions t;
  t.lr = o.lr;
  t.adamw.weight_decay = o.weight_decay;
  t.clip_norm = o.clip_norm;
  t.threads = static_cast<int>(o.threads);
  t.warmup_steps = o.warmup_steps;
  t.total_steps = o.steps;
  t.memory_schedule.offload_experts = o.offload_experts;
  t.memory_schedule.moe_chunks = static_cast<int>(o.moe_chunks);
  t.memory_schedule.micro_batches = static_cast<int>(o.micro_batches);
  t.memory_schedule.device_memory_bytes = o.device_memory_bytes;
  t.memory_schedule.host_memory_bytes = o.host_memory_bytes;
  t.memory_schedule.ssd_dir = o.ssd_dir;
  t.memory_schedule.trace_out = o.trace_out;
  t.memory_schedule.train_devices = static_cast<int>(o.train_devices);
  if (!train::ParseActivationRestore(o.activation_restore,
                                     &t.memory_schedule.activation_restore)) {
    return absl::InvalidArgumentError("--activation_restore: expected auto, recompute or offload, "
                                      "got '" + o.activation_restore + "'");
  }
  if (o.train_devices > 1 && o.micro_batches != 1) {
    return absl::InvalidArgumentError(
        "--train_devices > 1 runs the experts without micro-batches: it does not combine with "
        "--micro_batches (--moe_chunks and --offload_experts do)");
  }
  if (o.train_devices > 1 && (o.host_memory_bytes > 0 || !o.ssd_dir.empty())) {
    return absl::InvalidArgumentError(
        "--train_devices > 1 with --offload_experts keeps the experts in the host tier: it does "
        "not combine with the SSD tier (--host_memory_bytes, --ssd_dir)");
  }
  if (!o.ssd_dir.empty() || o.host_memory_bytes > 0) {
    if (!o.offload_experts) {
      return absl::InvalidArgumentError("--host_memory_bytes and --ssd_dir need --offload_experts");
    }
  }
  if (o.scope == "full") {
    t.scope = train::TrainScope::kFull;
  } else if (o.scope == "experts") {
    t.scope = train::TrainScope::kExperts;
  } else if (o.scope == "lora") {
    t.scope = train::TrainScope::kLora;
  } else if (o.scope != "pregate") {
    return absl::InvalidArgumentError("--scope: expected full, experts, lora or pregate, got '" +
                                      o.scope + "'");
  }
  if ((!o.pregate_out.empty() || !o.eval_batch.empty()) && o.scope != "pregate") {
    return absl::InvalidArgumentError("--pregate_out and --eval_batch need --scope=pregate");
  }
  if (!o.lora_out.empty() && o.scope != "lora") {
    return absl::InvalidArgumentError("--lora_out needs --scope=lora");
  }
  if (o.schedule == "constant") {
    t.schedule = train::LrSchedule::kConstant;
  } else if (o.schedule == "linear") {
    t.schedule = train::LrSchedule::kLinear;
  } else if (o.schedule == "cosine") {
    t.schedule = train::LrSchedule::kCosine;
  } else {
    return absl::InvalidArgumentError("--schedule: expected constant, linear or cosine, got '" +
                                      o.schedule + "'");
  }
  return t;
}

// Copies every gradient (fp32) out of the model, for --grads_out.
std::vector<std::pair<models::TensorSpec, std::vector<float>>> SnapshotGrads(
    const train::TrainModel& model) {
  std::vector<std::pair<models::TensorSpec, std::vector<float>>> out;
  for (const train::Parameter& p : model.params()) {
    if (!p.has_grad) continue;
    out.push_back({models::TensorSpec{p.name, models::DType::kF32, p.shape}, p.grad});
  }
  return out;
}

nlohmann::json ScheduleJson(const train::ScheduleReport& r) {
  nlohmann::json j = {{"expert_placement", r.expert_placement},
          {"placement_reason", r.placement_reason},
          {"device_memory_bytes", r.device_memory_bytes},
          {"peak_device_bytes", r.peak_device_bytes},
          {"static_device_bytes", r.static_device_bytes},
          {"uploaded_bytes", r.uploaded_bytes},
          {"upload_seconds", r.upload_seconds},
          {"ssd_read_bytes", r.ssd_read_bytes},
          {"ssd_written_bytes", r.ssd_written_bytes},
          {"ssd_waits", r.ssd_waits},
          {"ssd_prefetches", r.ssd_prefetches},
          {"ssd_wait_seconds", r.ssd_wait_seconds},
          {"ssd_skipped_uses", r.ssd_skipped_uses},
          {"ssd_host_capacity_experts", r.ssd_host_capacity_experts},
          {"ssd_host_peak_experts", r.ssd_host_peak_experts},
          {"ssd_unplanned_pins", r.ssd_unplanned_pins},
          {"step_seconds", r.step_seconds},
          {"recomputed_flops", r.recomputed_flops},
          {"early_expert_updates", r.early_expert_updates},
          {"redone_expert_updates", r.redone_expert_updates},
          {"offloaded_activation_bytes", r.offloaded_activation_bytes},
          {"restored_activation_bytes", r.restored_activation_bytes},
          {"activation_restore", r.activation_restore},
          {"moe_chunks", r.moe_chunks},
          {"micro_batches", r.micro_batches},
          {"predicted_peak_activation_bytes", r.predicted_peak_activation_bytes},
          {"measured_peak_activation_bytes", r.measured_peak_activation_bytes}};
  if (!r.device_imbalance.empty()) {
    j["device_imbalance"] = r.device_imbalance;
    j["measured_device_imbalance"] = r.measured_device_imbalance;
    j["pinned_experts"] = r.pinned_experts;
    j["placed_upload_bytes"] = r.placed_upload_bytes;
    j["placed_upload_seconds"] = r.placed_upload_seconds;
    j["measured_placed_upload_bytes"] = r.measured_placed_upload_bytes;
    j["measured_placed_upload_seconds"] = r.measured_placed_upload_seconds;
    j["placement_flops_per_second"] = r.placement_flops_per_second;
  }
  if (!r.device_peak_bytes.empty()) {
    j["device_peak_bytes"] = r.device_peak_bytes;
    j["device_cached_experts"] = r.device_cached_experts;
  }
  return j;
}

nlohmann::json QualityJson(const train::PredictionQuality& q) {
  return {{"precision", q.precision}, {"recall", q.recall}, {"tokens", q.tokens}};
}

// --scope=pregate: distils the pre-gate heads on the batch, compares them with
// the speculative guess on --eval_batch (default: the batch itself).
absl::Status RunPregate(const Options& o, const train::TrainBatch& batch,
                        train::TrainModel* model) {
  train::PregateOptions popts;
  popts.steps = o.steps;
  popts.lr = o.lr;
  popts.weight_decay = o.weight_decay;
  std::unique_ptr<engine::ThreadPool> pool;
  if (o.threads > 1) pool = std::make_unique<engine::ThreadPool>(static_cast<int>(o.threads));
  ASSIGN_OR_RETURN(train::PregateHeads heads,
                   train::TrainPregates(model, {batch}, popts, pool.get()));
  train::TrainBatch eval = batch;
  if (!o.eval_batch.empty()) {
    ASSIGN_OR_RETURN(eval, ReadBatch(o.eval_batch));
  }
  ASSIGN_OR_RETURN(train::PredictionQuality trained,
                   train::EvaluatePregates(model, &heads, {eval}, pool.get()));
  ASSIGN_OR_RETURN(train::PredictionQuality speculative,
                   train::EvaluatePregates(model, nullptr, {eval}, pool.get()));
  if (!o.pregate_out.empty()) {
    RETURN_IF_ERROR(train::WritePregateCheckpoint(o.model, heads, o.pregate_out));
  }
  const nlohmann::json out = {{"pregate_steps", heads.step_losses},
                              {"trained", QualityJson(trained)},
                              {"speculative", QualityJson(speculative)}};
  std::cout << out.dump() << std::endl;
  return absl::OkStatus();
}

absl::Status Run(const Options& o) {
  if (o.model.empty()) return absl::InvalidArgumentError("--model=DIR is required");
  if (o.batch.empty()) return absl::InvalidArgumentError("--batch=BATCH.json is required");
  ASSIGN_OR_RETURN(train::TrainBatch all_rows, ReadBatch(o.batch));
  ASSIGN_OR_RETURN(train::TrainOptions topts, MakeOptions(o));
  models::CheckpointOptions copts;
  copts.weights_file = o.weights;
  ASSIGN_OR_RETURN(std::unique_ptr<train::TrainModel> model,
                   train::TrainModel::Load(o.model, copts));
  if (o.scope == "pregate") return RunPregate(o, all_rows, model.get());
  train::LoraOptions lora;
  lora.rank = o.lora_rank;
  lora.alpha = o.lora_alpha;
  lora.seed = static_cast<uint64_t>(o.seed);
  if (topts.scope == train::TrainScope::kLora)
    RETURN_IF_ERROR(train::AttachLora(lora, model.get()));
  train::Trainer trainer(model.get(), topts);
  const int64_t rows = o.rows_per_step > 0 ? std::min(o.rows_per_step, all_rows.batch) : 0;
  train::TrainBatch batch = rows > 0 ? SliceRows(all_rows, 0, rows) : all_rows;
  std::vector<std::pair<models::TensorSpec, std::vector<float>>> grads;
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json schedule = nlohmann::json::array();
  for (int64_t s = 0; s < o.steps; ++s) {
    // Only when it is needed: an observer makes the step bring every expert
    // of the SSD tier back to the host, past --host_memory_bytes.
    std::function<void(const train::TrainModel&)> observe;
    if (s == 0 && !o.grads_out.empty()) {
      observe = [&](const train::TrainModel& m) { grads = SnapshotGrads(m); };
    }
    if (rows > 0) batch = SliceRows(all_rows, s * rows, rows);
    ASSIGN_OR_RETURN(train::StepReport r, trainer.Step({batch}, observe));
    steps.push_back({{"loss_total", r.loss.total},
                     {"ce_loss", r.loss.ce},
                     {"aux_loss", r.loss.aux},
                     {"grad_norm_before_clip", r.grad_norm_before_clip}});
    if (topts.memory_schedule.active()) schedule.push_back(ScheduleJson(r.memory_schedule));
  }
  RETURN_IF_ERROR(trainer.WriteTrace());
  RETURN_IF_ERROR(trainer.HoldExpertsOnHost());  // the SSD tier's experts, for the files below
  if (!o.grads_out.empty()) {
    std::vector<models::TensorToWrite> tensors;
    for (const auto& [spec, values] : grads) tensors.push_back({spec, values.data()});
    RETURN_IF_ERROR(models::WriteSafetensors(o.grads_out, tensors));
  }
  if (!o.weights_out.empty()) {
    std::vector<models::TensorToWrite> tensors;
    for (const train::Parameter& p : model->params()) {
      tensors.push_back({models::TensorSpec{p.name, models::DType::kF32, p.shape}, p.value.data()});
    }
    RETURN_IF_ERROR(models::WriteSafetensors(o.weights_out, tensors));
  }
  if (!o.lora_out.empty()) {
    RETURN_IF_ERROR(train::WriteLoraAdapter(*model, lora, o.model, o.lora_out));
  }
  ASSIGN_OR_RETURN(train::LossBreakdown final_loss, trainer.Evaluate(batch));
  nlohmann::json out = {{"steps", steps}, {"loss_after_final_step", final_loss.total}};
  if (topts.memory_schedule.active()) out["schedule"] = schedule;
  std::cout << out.dump() << std::endl;
  return absl::OkStatus();
}

}  // namespace
}  // namespace expertd

int main(int argc, char** argv) {
  expertd::Options o;
  expertd::FlagSet flags(
      "expertd-train --model=DIR --batch=BATCH.json --steps=N --lr=1e-3 --weight_decay=0.01 "
      "--clip_norm=1.0 [--grads_out=GRADS.safetensors]");
  flags.String("model", &o.model, "Hugging Face model directory");
  flags.String("batch", &o.batch, "BATCH.json: {\"input_ids\": [[...], ...]}");
  flags.Int("steps", &o.steps, 0, 1 << 30, "optimizer steps on the batch");
  flags.Double("lr", &o.lr, 0.0, 1e3, "peak learning rate");
  flags.Double("weight_decay", &o.weight_decay, 0.0, 1e3, "AdamW decoupled weight decay");
  flags.Double("clip_norm", &o.clip_norm, 0.0, 1e30, "global gradient norm clip (0 = off)");
  flags.String("grads_out", &o.grads_out, "write the first step's gradients here (safetensors)");
  flags.String("weights", &o.weights,
               "weights file inside DIR (e.g. model.bf16.safetensors); default model.safetensors");
  flags.String("weights_out", &o.weights_out, "write the trained weights here (fp32 safetensors)");
  flags.Int("lora_rank", &o.lora_rank, 1, 4096, "LoRA rank r (--scope=lora)");
  flags.Double("lora_alpha", &o.lora_alpha, 1e-9, 1e9, "LoRA alpha (scaling alpha / r)");
  flags.Int("seed", &o.seed, 0, 1ll << 62, "seed of the LoRA A initialisation");
  flags.String("lora_out", &o.lora_out, "write the adapter here in the PEFT layout (directory)");
  flags.String("eval_batch", &o.eval_batch, "held-out BATCH.json for --scope=pregate");
  flags.String("pregate_out", &o.pregate_out,
               "write the model with its trained pre-gates here (--scope=pregate)");
  flags.Int("threads", &o.threads, 1, 1024, "CPU threads");
  flags.String("scope", &o.scope, "full | experts");
  flags.Bool("offload_experts", &o.offload_experts,
             "ES-MoE: experts, their gradients and AdamW state in the host tier when the device "
             "does not hold them (adaptive)");
  flags.Int("moe_chunks", &o.moe_chunks, 0, 8,
            "MemFine: split each expert's tokens in K chunks, recomputed in backward (0 = auto)");
  flags.Int("micro_batches", &o.micro_batches, 0, 8,
            "MPMoE: pipeline each expert's tokens in N micro-batches (0 = auto, 1 = off)");
  flags.Int("device_memory_bytes", &o.device_memory_bytes, 0, 1ll << 50,
            "the device's memory; 0 = unlimited");
  flags.Int("host_memory_bytes", &o.host_memory_bytes, 0, 1ll << 50,
            "host tier budget for offloaded experts; 0 = unlimited");
  flags.String("activation_restore", &o.activation_restore,
               "MPMoE: how backward restores micro-batches' activations: recompute | offload | "
               "auto (profiled with --micro_batches)");
  flags.Int("train_devices", &o.train_devices, 1, 64,
            "ES-MoE: run each MoE layer's experts over N CPU virtual devices, placed per step "
            "(with --offload_experts: --device_memory_bytes per device)");
  flags.String("ssd_dir", &o.ssd_dir, "directory of the SSD tier (past --host_memory_bytes)");
  flags.String("trace_out", &o.trace_out,
               "write a Chrome trace JSON of uploads, expert compute and optimizer steps");
  flags.Int("rows_per_step", &o.rows_per_step, 0, 1 << 30,
            "train step s on the N rows of BATCH.json from row s*N, wrapping (0 = every row)");
  flags.String("schedule", &o.schedule, "constant | linear | cosine (after warmup)");
  flags.Int("warmup_steps", &o.warmup_steps, 0, 1 << 30, "linear warmup steps");
  absl::Status parsed = flags.Parse(argc, argv, nullptr);
  if (flags.help_requested()) {
    std::cout << flags.Usage();
    return 0;
  }
  if (!parsed.ok()) {
    std::cerr << "expertd-train: " << parsed.message() << "\n" << flags.Usage();
    return 2;
  }
  absl::Status st = expertd::Run(o);
  if (!st.ok()) {
    std::cerr << "expertd-train: " << st << "\n";
    return 1;
  }
  return 0;
}
