#include "engine/train/train_checkpoint.h"

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "models/checkpoint/checkpoint.h"
#include "models/config/model_config.h"
#include "models/dtype/dtype.h"
#include "models/safetensors/safetensors_reader.h"
#include "models/safetensors/safetensors_writer.h"

namespace expertd::train {

const char* const kCopiedModelFiles[7] = {
    "generation_config.json",  "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "vocab.json",     "merges.txt",
    "tokenizer.model"};

namespace {

constexpr char kStateFormat[] = "expertd-training-state";
constexpr char kAdapterPrefix[] = "base_model.model.";

bool IsAdapter(const Parameter& p) { return absl::StartsWith(p.name, kAdapterPrefix); }

// model.safetensors: the held weights (merged for LoRA) in their stored dtype,
// then whatever else the source checkpoint has, unchanged.
absl::Status WriteModelWeights(Env* env, const TrainModel& model, const CheckpointSource& source,
                               const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<models::Checkpoint> src,
                   models::Checkpoint::Open(source.model_dir, models::CheckpointOptions{"", env}));
  std::vector<models::TensorSpec> specs;
  std::map<std::string, std::function<void(uint8_t*)>> fill;
  for (const Parameter& p : model.params()) {
    if (IsAdapter(p)) continue;
    specs.push_back({p.name, p.dtype, p.shape});
    fill[p.name] = [&p, lora = source.lora != nullptr](uint8_t* dst) {
      if (lora && p.lora_a != nullptr) {
        const std::vector<float> merged = MergedWeight(p);
        models::ConvertFromF32(p.dtype, merged.data(), dst, merged.size());
      } else {
        models::ConvertFromF32(p.dtype, p.value.data(), dst, p.value.size());
      }
    };
  }
  const bool tied = model.config().tie_word_embeddings;
  for (const std::string& name : src->Names()) {
    if (fill.count(name) != 0 || (tied && name == "lm_head.weight")) continue;
    ASSIGN_OR_RETURN(models::TensorView v, src->Get(name));
    specs.push_back({name, v.dtype, v.shape});
    fill[name] = [v](uint8_t* dst) { std::memcpy(dst, v.data, v.nbytes); };
  }
  return models::WriteSafetensors(
      path, specs,
      [&](const models::TensorSpec& spec, uint8_t* dst) {
        fill.at(spec.name)(dst);
        return absl::OkStatus();
      },
      {{"format", "pt"}}, env);
}

absl::Status WriteState(Env* env, const TrainModel& model, AdamW& optimizer,
                        const TrainingProgress& progress, const std::string& dir) {
  const std::vector<AdamWParamState>& state = optimizer.state();
  std::vector<models::TensorToWrite> tensors;
  nlohmann::json steps = nlohmann::json::object();
  for (size_t i = 0; i < state.size() && i < model.params().size(); ++i) {
    const Parameter& p = model.params()[i];
    const AdamWParamState& s = state[i];
    if (s.step == 0) continue;
    steps[p.name] = s.step;
    tensors.push_back({{"exp_avg." + p.name, models::DType::kF32, p.shape}, s.m.data()});
    tensors.push_back({{"exp_avg_sq." + p.name, models::DType::kF32, p.shape}, s.v.data()});
    if (!s.master.empty()) {
      tensors.push_back({{"master." + p.name, models::DType::kF32, p.shape}, s.master.data()});
    }
  }
  RETURN_IF_ERROR(models::WriteSafetensors(dir + "/training_state.safetensors", tensors,
                                           {{"format", kStateFormat}}, env));
  const nlohmann::json json = {{"format", kStateFormat},
                               {"version", 1},
                               {"step", progress.step},
                               {"epoch", progress.cursor.epoch},
                               {"position", progress.cursor.position},
                               {"seed", progress.seed},
                               {"trained_tokens", progress.trained_tokens},
                               {"adamw_steps", steps},
                               {"extra", progress.extra}};
  return WriteFileAtomically(env, dir + "/training_state.json", json.dump(2) + "\n");
}

absl::Status WriteAll(Env* env, const TrainModel& model, AdamW& optimizer,
                      const TrainingProgress& progress, const CheckpointSource& source,
                      const std::string& dir) {
  const std::string config_path = source.model_dir + "/config.json";
  ASSIGN_OR_RETURN(std::string config, ReadFileToString(env, config_path));
  RETURN_IF_ERROR(WriteFileAtomically(env, dir + "/config.json", config));
  for (const char* name : kCopiedModelFiles) {
    const std::string from = source.model_dir + "/" + name;
    if (!FileExists(env, from)) continue;
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, from));
    RETURN_IF_ERROR(WriteFileAtomically(env, dir + "/" + name, text));
  }
  if (!FileExists(env, source.model_dir + "/generation_config.json")) {
    // transformers' save_pretrained always writes one, derived from the
    // config when the model had none; so does a checkpoint.
    ASSIGN_OR_RETURN(std::string generation,
                     models::GenerationConfigFromModelConfig(config, config_path));
    RETURN_IF_ERROR(WriteFileAtomically(env, dir + "/generation_config.json", generation));
  }
  RETURN_IF_ERROR(WriteModelWeights(env, model, source, dir + "/model.safetensors"));
  if (source.lora != nullptr) {
    RETURN_IF_ERROR(
        WriteLoraAdapter(model, *source.lora, source.base_model_name, dir + "/adapter", env));
  }
  return WriteState(env, model, optimizer, progress, dir);
}

}  // namespace

absl::Status RemoveTree(Env* env, const std::string& path) {
  absl::StatusOr<FileType> type = env->GetFileType(path);
  if (absl::IsNotFound(type.status())) return absl::OkStatus();
  RETURN_IF_ERROR(type.status());
  if (*type != FileType::kDirectory) return env->RemoveFile(path);
  ASSIGN_OR_RETURN(std::vector<std::string> entries, env->ListDir(path));
  for (const std::string& e : entries) RETURN_IF_ERROR(RemoveTree(env, path + "/" + e));
  return env->RemoveDir(path);
}

absl::Status WriteTrainingCheckpoint(Env* env, const TrainModel& model, AdamW& optimizer,
                                     const TrainingProgress& progress,
                                     const CheckpointSource& source, const std::string& dir) {
  const std::string partial = dir + ".partial";
  RETURN_IF_ERROR(RemoveTree(env, partial));
  RETURN_IF_ERROR(CreateDirs(env, partial));
  absl::Status written = WriteAll(env, model, optimizer, progress, source, partial);
  if (written.ok()) written = RemoveTree(env, dir);  // a stale, unrecorded copy
  if (written.ok()) written = env->RenameFile(partial, dir);
  if (written.ok()) written = env->SyncDir(DirName(dir));
  if (!written.ok()) {
    RemoveTree(env, partial).IgnoreError();  // best effort: free what it took
    return written;
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingProgress> RestoreTrainingState(Env* env, const std::string& dir,
                                                      TrainModel* model, AdamW* optimizer) {
  const std::string json_path = dir + "/training_state.json";
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, json_path));
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded() || !json.is_object() || json.value("format", "") != kStateFormat ||
      json.value("version", 0) != 1 || !json["adamw_steps"].is_object()) {
    return absl::DataLossError(json_path + ": not an expertd training state (version 1)");
  }
  ASSIGN_OR_RETURN(auto tensors,
                   models::SafetensorsFile::Open(dir + "/training_state.safetensors", env));
  auto read = [&](const std::string& name, const Parameter& p,
                  std::vector<float>* out) -> absl::Status {
    const models::SafetensorsEntry* e = tensors->Find(name);
    if (e == nullptr || e->dtype != models::DType::kF32 || e->shape != p.shape) {
      return absl::DataLossError(absl::StrCat(dir, ": training state lacks ", name, " of shape [",
                                              absl::StrJoin(p.shape, ","), "]"));
    }
    out->resize(p.value.size());
    std::memcpy(out->data(), tensors->Data(*e), out->size() * sizeof(float));
    return absl::OkStatus();
  };
  std::vector<AdamWParamState>& state = optimizer->state();
  state.assign(model->params().size(), AdamWParamState{});
  int64_t restored = 0;
  for (size_t i = 0; i < model->params().size(); ++i) {
    Parameter& p = model->params()[i];
    if (!json["adamw_steps"].contains(p.name)) continue;
    AdamWParamState& s = state[i];
    s.step = json["adamw_steps"][p.name].get<int64_t>();
    RETURN_IF_ERROR(read("exp_avg." + p.name, p, &s.m));
    RETURN_IF_ERROR(read("exp_avg_sq." + p.name, p, &s.v));
    if (p.dtype != models::DType::kF32) {
      RETURN_IF_ERROR(read("master." + p.name, p, &s.master));
      std::vector<uint16_t> rounded(p.value.size());
      models::ConvertFromF32(p.dtype, s.master.data(), rounded.data(), rounded.size());
      models::ConvertToF32(p.dtype, rounded.data(), p.value.data(), rounded.size());
    }
    ++restored;
  }
  if (restored != static_cast<int64_t>(json["adamw_steps"].size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(json_path, ": the state names parameters the model does not have"));
  }
  TrainingProgress progress;
  progress.step = json.value("step", int64_t{0});
  progress.cursor.epoch = json.value("epoch", int64_t{0});
  progress.cursor.position = json.value("position", int64_t{0});
  progress.seed = json.value("seed", uint64_t{0});
  progress.trained_tokens = json.value("trained_tokens", int64_t{0});
  progress.extra = json.value("extra", nlohmann::json::object());
  return progress;
}

}  // namespace expertd::train
