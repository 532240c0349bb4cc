// AttentionLayer: one decoder layer's self-attention, a seam so that
// DeepSeek-V3's multi-head latent attention (MLA) can slot in beside
// grouped-query attention without touching the rest of the model.
#ifndef EXPERTD_ENGINE_MODEL_ATTENTION_H_
#define EXPERTD_ENGINE_MODEL_ATTENTION_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/layer_context.h"
#include "engine/model/resident_weights.h"
#include "engine/model/rope.h"
#include "models/config/model_config.h"

namespace expertd::engine {

// RoPE frequencies uploaded to the device (owned by the Model).
struct DeviceRope {
  const float* inv_freq = nullptr;  // [rotary_dim / 2]
  int64_t rotary_dim = 0;
  float attention_factor = 1.0f;
};

class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  // x: [rows, hidden] normalised layer input (device). Appends this step's
  // keys/values to the KV cache (layer ctx.layer, slots Buf::kSlotMap) and
  // adds the attention output (after o_proj) into residual [rows, hidden].
  virtual void Forward(const LayerContext& ctx, const float* x, float* residual) = 0;
};

// What the KV cache stores per token per layer, in floats. MLA: k is the
// latent plus the rope key, v is 0 (the attention reads values from the same row).
struct KvWidths {
  int64_t k = 0, v = 0;
};
KvWidths AttentionKvWidths(const models::ModelConfig& config);

// Grouped-query attention (Mixtral, Qwen2/3-MoE, OLMoE): q/k/v projections
// (+ bias), optional q/k RMSNorm (per head, or over the whole projection),
// optional clip_qkv, RoPE, causal attention over the block KV cache, o_proj.
absl::StatusOr<std::unique_ptr<AttentionLayer>> CreateGqaAttention(
    ResidentWeights* store, const models::ModelConfig& config, int layer, const DeviceRope& rope);

// DeepSeek-V3's multi-head latent attention (mla_attention.cc): caches the
// normalised latent and the shared rope key per token ({kv_lora_rank +
// qk_rope_head_dim, 0} KvWidths) and attends in the absorbed form. `rope` is
// ComputeMlaRopeTable's (mla_rope.h).
absl::StatusOr<std::unique_ptr<AttentionLayer>> CreateMlaAttention(
    ResidentWeights* store, const models::ModelConfig& config, int layer, const DeviceRope& rope);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_ATTENTION_H_
