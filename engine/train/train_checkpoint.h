// Training checkpoints: a Hugging Face model directory that our engine serves
// and transformers loads, plus the state that resumes training bitwise.
//
//   DIR/config.json                 copied from the source model directory
//   DIR/model.safetensors           every weight in its stored dtype under its
//                                   HF name (LoRA runs: the merged weights);
//                                   source tensors the trainer does not hold
//                                   (e.g. pre-gate heads) are copied unchanged
//   DIR/generation_config.json      copied, or when the source has none
//                                   derived from config.json as transformers'
//                                   save_pretrained writes it
//   DIR/tokenizer files             copied when present
//   DIR/adapter/adapter_config.json + adapter_model.safetensors
//                                   LoRA runs only: the adapter, PEFT layout
//   DIR/training_state.json         step, data cursor, seed, trained tokens,
//                                   each parameter's AdamW step count, the
//                                   caller's `extra` (e.g. its options)
//   DIR/training_state.safetensors  fp32 AdamW moments (exp_avg.<name>,
//                                   exp_avg_sq.<name>) and fp32 master
//                                   weights (master.<name>) of bf16/fp16
//                                   parameters
//
// A run draws randomness only from its seed (LoRA initialisation, the epoch
// order of data_stream.h), so the seed and the data cursor are its whole RNG
// state. Restoring all of the above into a freshly loaded model and a fresh
// Trainer continues bitwise as the uninterrupted run would.
//
// Durability: every file is written through `env` to a temp name, fsynced and
// renamed (base/env.h), inside DIR + ".partial"; that directory is then
// renamed to DIR and its parent synced, so DIR exists only when complete. A
// stale DIR (e.g. written before a crash but never recorded) is replaced.
#ifndef EXPERTD_ENGINE_TRAIN_TRAIN_CHECKPOINT_H_
#define EXPERTD_ENGINE_TRAIN_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "base/env.h"
#include "engine/train/adamw.h"
#include "engine/train/data_stream.h"
#include "engine/train/lora.h"
#include "engine/train/train_model.h"
#include "nlohmann/json.hpp"

namespace expertd::train {

struct TrainingProgress {
  int64_t step = 0;  // optimizer steps done (the LR schedule position)
  DataCursor cursor;
  uint64_t seed = 0;
  int64_t trained_tokens = 0;
  nlohmann::json extra = nlohmann::json::object();
};

struct CheckpointSource {
  // config.json, tokenizer and generation files, and tensors the model does
  // not hold come from here (the served model's directory).
  std::string model_dir;
  const LoraOptions* lora = nullptr;  // non-null: a LoRA run
  std::string base_model_name;        // adapter_config.json's base_model_name_or_path
};

// The extra files copied from the source directory when present.
extern const char* const kCopiedModelFiles[7];

absl::Status WriteTrainingCheckpoint(Env* env, const TrainModel& model, AdamW& optimizer,
                                     const TrainingProgress& progress,
                                     const CheckpointSource& source, const std::string& dir);

// Restores the optimizer state of checkpoint DIR into `optimizer` (for the
// parameters of `model`, matched by name; master weights also set the model
// weight) and returns the progress. `model` must already hold the
// checkpoint's weights: TrainModel::Load(DIR), or for LoRA the source model
// with LoadLoraAdapter(DIR + "/adapter"). InvalidArgument / DataLoss when the
// state does not fit the model.
absl::StatusOr<TrainingProgress> RestoreTrainingState(Env* env, const std::string& dir,
                                                      TrainModel* model, AdamW* optimizer);

// rm -r through `env` (OK when `path` does not exist).
absl::Status RemoveTree(Env* env, const std::string& path);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_TRAIN_CHECKPOINT_H_
