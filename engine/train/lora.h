// LoRA adapters for the training engine, in Hugging Face PEFT's layout.
//
// A target is every Linear weight whose module name ends in one of
// `target_modules` (PEFT's suffix match): by default the attention projections
// (q_proj, k_proj, v_proj, o_proj) and the expert projections (gate_proj,
// up_proj, down_proj; Mixtral's w1, w3, w2), which also covers shared experts
// and dense MLP layers. Each target W (out, in) gets
//   A (r, in) = kaiming-uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), B (out, r) = 0
// and computes x W^T + (alpha / r) * (x A^T) B^T (dropout 0). Adapter
// parameters are named as PEFT saves them:
//   base_model.model.<module>.lora_A.weight / .lora_B.weight
// e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.
#ifndef EXPERTD_ENGINE_TRAIN_LORA_H_
#define EXPERTD_ENGINE_TRAIN_LORA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/env.h"
#include "engine/train/train_model.h"

namespace expertd::train {

struct LoraOptions {
  int64_t rank = 8;
  double alpha = 16.0;
  uint64_t seed = 0;  // A's initialisation
  std::vector<std::string> target_modules = {"q_proj",    "k_proj",  "v_proj",    "o_proj",
                                             "gate_proj", "up_proj", "down_proj", "w1",
                                             "w2",        "w3"};
};

// Whether a weight named `weight_name` with `dims` dimensions is adapted for
// the target module `target_module` (PEFT's suffix match on Linear weights):
// what AttachLora matches, usable on a config's tensor list before any
// weights are loaded.
bool IsLoraTarget(const std::string& weight_name, size_t dims, const std::string& target_module);

// The PEFT names of the adapter of weight `weight_name` ("....q_proj.weight").
std::string LoraAName(const std::string& weight_name);
std::string LoraBName(const std::string& weight_name);

// Adds fresh adapters (A random from options.seed, B zero) to every target.
// InvalidArgument for rank < 1, alpha <= 0, or when nothing matches.
absl::Status AttachLora(const LoraOptions& options, TrainModel* model);

// Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (fp32).
// Creates DIR if needed; every file goes through `env` (atomically).
absl::Status WriteLoraAdapter(const TrainModel& model, const LoraOptions& options,
                              const std::string& base_model, const std::string& dir,
                              Env* env = Env::Default());

// Reads a PEFT adapter directory (LORA, no dropout, no DoRA/rsLoRA) and
// attaches it to `model`: every adapter tensor must name a weight of the
// model, with shapes (r, in) / (out, r).
absl::Status LoadLoraAdapter(const std::string& dir, TrainModel* model);

// W += (alpha / r) * B A for every adapted weight (rounded to the weight's
// stored dtype), then detaches the adapters (their parameters stay, unused).
void MergeLora(TrainModel* model);

// What MergeLora would make of weight `w` (bitwise), leaving the model as it
// is: W + (alpha / r) * B A rounded to w's dtype; w.value for a weight
// without an adapter.
std::vector<float> MergedWeight(const Parameter& w);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_LORA_H_
