// TrainModel: a Hugging Face MoE decoder (Mixtral, Qwen2-MoE, Qwen3-MoE,
// OLMoE, DeepSeek-V3) held as fp32 parameters, with a forward pass that keeps
// its activations and the matching backward pass. The loss is what the HF
// *ForCausalLM classes compute with labels and output_router_logits:
//   ce  = mean over predicted tokens of cross-entropy(logits[t], labels[t+1])
//         (labels shifted inside; ignore_index -100 tokens do not count),
//   aux = HF load_balancing_loss_func over every MoE layer's router logits,
//   total = ce + router_aux_loss_coef * aux.
// DeepSeek-V3 (sigmoid routing) has no auxiliary loss in its published code:
// aux = 0 and total = ce; its e_score_correction_bias gets no gradient.
//
// Thread safety: one thread at a time (the pool parallelises inside ops).
#ifndef EXPERTD_ENGINE_TRAIN_TRAIN_MODEL_H_
#define EXPERTD_ENGINE_TRAIN_TRAIN_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/train/attention_block.h"
#include "engine/train/device_memory.h"
#include "engine/train/mla_block.h"
#include "engine/train/moe_block.h"
#include "engine/train/parameter.h"
#include "models/checkpoint/checkpoint.h"
#include "models/config/model_config.h"

namespace expertd::train {

inline constexpr int32_t kIgnoreIndex = -100;

// B sequences of T tokens. labels empty = input_ids.
struct TrainBatch {
  int64_t batch = 0, seq_len = 0;
  std::vector<int32_t> input_ids;  // (B,T)
  std::vector<int32_t> labels;     // (B,T) or empty
};

struct LossBreakdown {
  float total = 0.0f;
  float ce = 0.0f;
  float aux = 0.0f;  // 0 when the model has no MoE layer
  int64_t predicted_tokens = 0;
};

struct LayerParams {
  Parameter* input_norm = nullptr;
  Parameter* post_attention_norm = nullptr;
  AttentionParams attn;  // when the model does not use MLA
  MlaParams mla;         // DeepSeek-V3
  FeedForwardParams ffn;
};

class TrainModel {
 public:
  // Loads DIR (config.json + safetensors, any of fp32/bf16/fp16).
  // Unimplemented for rope_scaling other than YaRN on MLA models, for
  // DeepSeek routing other than noaux_tc, and for sliding-window attention.
  static absl::StatusOr<std::unique_ptr<TrainModel>> Load(const std::string& dir);
  // The same, reading the weights as `options` says (e.g. model.bf16.safetensors).
  static absl::StatusOr<std::unique_ptr<TrainModel>> Load(const std::string& dir,
                                                          const models::CheckpointOptions& options);

  const models::ModelConfig& config() const { return config_; }
  // All parameters, sorted by name; a tied weight appears once (under the
  // embedding's name).
  std::vector<Parameter>& params() { return params_; }
  const std::vector<Parameter>& params() const { return params_; }
  Parameter* Find(const std::string& name);
  const std::vector<LayerParams>& layers() const { return layers_; }
  // -1 = none: the embedding row whose gradient stays zero (HF padding_idx).
  int32_t padding_idx() const { return padding_idx_; }

  // Appends parameters (e.g. LoRA adapters) and re-binds the layers. Pointers
  // to parameters taken before are invalid afterwards. InvalidArgument on a
  // duplicate name.
  absl::Status AddParameters(std::vector<Parameter> extra);

  // What each MoE layer's router saw and chose on `batch` (forward only):
  // router_input (N,H) = the post-attention norm output (every layer),
  // probs (N,E), topk_ids (N,K) (MoE layers; empty for dense ones).
  struct RouterTrace {
    std::vector<float> router_input, probs;
    std::vector<int32_t> topk_ids;
  };
  absl::StatusOr<std::vector<RouterTrace>> TraceRouting(const TrainBatch& batch, ThreadPool* pool);

  // Replaces how each layer's feed-forward block runs (default: in memory).
  void set_feed_forward_executor(std::unique_ptr<FeedForwardExecutor> executor) {
    executor_ = std::move(executor);
  }
  FeedForwardExecutor* feed_forward_executor() { return executor_.get(); }
  // Counts each step's activations outside the feed-forward blocks (layer
  // inputs, norms, attention, logits) on `device` (null: not counted); a step
  // whose activations do not fit fails with ResourceExhausted. `device` must
  // outlive its use.
  void set_device_memory(DeviceMemoryTracker* device) { device_ = device; }

  // Forward over `batch`; when `backward`, also backward of
  // `loss_scale * total`, ACCUMULATING into each trainable parameter's grad.
  // InvalidArgument for a malformed batch (token id out of range, shape).
  // If `logits` is non-null it receives the LM head's output (B*T, vocab).
  absl::StatusOr<LossBreakdown> Step(const TrainBatch& batch, bool backward, float loss_scale,
                                     ThreadPool* pool, std::vector<float>* logits = nullptr);

 private:
  struct LayerActivations;
  struct StepState;
  TrainModel() = default;
  absl::Status Forward(const TrainBatch& batch, StepState* st, ThreadPool* pool);
  absl::Status LayerForward(const LayerParams& lp, StepState* st, std::vector<float>* x,
                            LayerActivations* a, ThreadPool* pool);
  absl::Status LayerBackward(LayerParams& lp, const StepState& st, const LayerActivations& a,
                             const std::vector<float>& aux_dprob, std::vector<float>* dx,
                             ThreadPool* pool);
  // The auxiliary loss into *aux; returns d(loss_scale * coef * aux)/d prob[e].
  std::vector<float> AuxLossAndGradient(const StepState& st, float loss_scale, float* aux) const;
  absl::Status Bind();
  absl::Status ValidateBatch(const TrainBatch& batch) const;

  models::ModelConfig config_;
  std::vector<Parameter> params_;
  std::map<std::string, size_t> index_;
  Parameter* embed_ = nullptr;
  Parameter* final_norm_ = nullptr;
  Parameter* lm_head_ = nullptr;  // == embed_ when tied
  std::vector<LayerParams> layers_;
  int32_t padding_idx_ = -1;
  std::unique_ptr<FeedForwardExecutor> executor_;
  DeviceMemoryTracker* device_ = nullptr;
};

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_TRAIN_MODEL_H_
