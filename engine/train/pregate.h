// Pre-gate training (the Pre-gated MoE idea): for every MoE layer N with a
// later MoE layer M, a head W_N (E, H) predicts layer M's experts from layer
// N's router input (what the `pregate` prefetcher computes:
// top-k(softmax(h_N W_N^T))). The model stays frozen; each head starts as the
// speculative guess (layer M's own router applied to h_N) and is trained by
// distillation from the model's own routing: cross-entropy between layer M's
// router distribution and the head's softmax, AdamW, full batch.
#ifndef EXPERTD_ENGINE_TRAIN_PREGATE_H_
#define EXPERTD_ENGINE_TRAIN_PREGATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/train/adamw.h"
#include "engine/train/train_model.h"

namespace expertd::train {

struct PregateOptions {
  int64_t steps = 200;
  double lr = 1e-2;
  double weight_decay = 0.0;
};

// One head per predicting layer N: weights (E, H) row-major.
struct PregateHeads {
  std::map<int64_t, std::vector<float>> heads;
  std::vector<float> step_losses;  // mean distillation loss over heads, per step
};

// Next-layer expert prediction quality over a batch: per token, the
// predicted top-k set against the true top-k set of the next MoE layer.
struct PredictionQuality {
  double precision = 0, recall = 0;
  int64_t tokens = 0;
};

// Called after each step with the steps done and a way to copy the heads as
// they stand (a snapshot costs one copy of every head: take it only when
// needed, e.g. for a checkpoint). A non-OK status (e.g. CancelledError for a
// stop request) ends the training and is returned by TrainPregates.
using PregateStepFn =
    std::function<absl::Status(int64_t steps_done, const std::function<PregateHeads()>& snapshot)>;

// Full-batch and without randomness: the same model, data, options and
// thread count give bitwise the same heads, also when a run is restarted.
absl::StatusOr<PregateHeads> TrainPregates(TrainModel* model, const std::vector<TrainBatch>& data,
                                           const PregateOptions& options, ThreadPool* pool,
                                           const PregateStepFn& on_step = nullptr);

// Quality of `heads` (trained) or, with heads == nullptr, of the speculative
// guess (the next MoE layer's router on this layer's router input).
absl::StatusOr<PredictionQuality> EvaluatePregates(TrainModel* model, const PregateHeads* heads,
                                                   const std::vector<TrainBatch>& data,
                                                   ThreadPool* pool);

// Writes DIR/model.safetensors (every tensor of `src_dir`'s checkpoint in its
// stored dtype, plus model.layers.N.mlp.pregate.weight (Mixtral:
// block_sparse_moe) in fp32), DIR/config.json with "expertd_pregate": true,
// and copies generation_config.json / tokenizer files when present.
absl::Status WritePregateCheckpoint(const std::string& src_dir, const PregateHeads& heads,
                                    const std::string& dir);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_PREGATE_H_
