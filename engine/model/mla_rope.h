// DeepSeek-V3's rotary embedding and attention scale, as its published
// modeling code computes them (which differs from Hugging Face's generic YaRN
// in where it rounds to fp32 and in its mscale defaults).
#ifndef EXPERTD_ENGINE_MODEL_MLA_ROPE_H_
#define EXPERTD_ENGINE_MODEL_MLA_ROPE_H_

#include "absl/status/statusor.h"
#include "engine/model/rope.h"
#include "models/config/model_config.h"

namespace expertd::engine {

// The RoPE table over qk_rope_head_dim. No scaling: inv_freq = 1 / theta^(2i/d).
// YaRN (DeepseekV3YarnRotaryEmbedding), every step in fp32 like torch:
//   extra = 1 / theta^(2i/d);  inter = 1 / (factor * theta^(2i/d))
//   low/high = correction range of beta_fast/beta_slow over
//              original_max_position_embeddings (floor/ceil, clamped to [0, d-1])
//   mask = 1 - clamp((i - low) / (high - low), 0, 1)
//   inv_freq = inter * (1 - mask) + extra * mask
//   attention_factor = mscale(factor, mscale) / mscale(factor, mscale_all_dim),
//   mscale(s, m) = s <= 1 ? 1 : 0.1 m ln(s) + 1   (mscale defaults 1, mscale_all_dim 0)
// The cos/sin multiply by attention_factor. Unimplemented for linear/llama3.
absl::StatusOr<RopeTable> ComputeMlaRopeTable(const models::ModelConfig& config);

// (qk_nope_head_dim + qk_rope_head_dim)^-0.5, times mscale(factor,
// mscale_all_dim)^2 when rope_scaling is set and mscale_all_dim is non-zero.
double MlaSoftmaxScale(const models::ModelConfig& config);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_MLA_ROPE_H_
