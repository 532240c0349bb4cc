// The complete list of tensors (HF name + shape) a checkpoint of a given
// ModelConfig must contain: the single source of truth used by
// Checkpoint::ValidateAgainstConfig and by the zoo's generator.
//
// Shapes, with H = hidden_size, V = vocab_size, nh/nkv = attention / kv heads,
// hd = head_dim, E = num_experts, I = moe_intermediate_size,
// D = intermediate_size (dense layers), S = shared_expert_intermediate_size:
//   embed_tokens [V,H], norm [H], lm_head [V,H] (unless tied)
//   per layer: input_layernorm, post_attention_layernorm [H]
//   attention: q_proj [nh*hd,H], k_proj/v_proj [nkv*hd,H], o_proj [H,nh*hd],
//     biases [nh*hd] / [nkv*hd] when attention_bias,
//     q_norm/k_norm [hd] (Qwen3-MoE) or [nh*hd]/[nkv*hd] (OLMoE);
//   MLA (DeepSeek-V3), with r = qk_rope_head_dim, n = qk_nope_head_dim,
//     v = v_head_dim, qr = q_lora_rank, kr = kv_lora_rank:
//     q_a_proj [qr,H], q_a_layernorm [qr], q_b_proj [nh*(n+r),qr]
//     (or q_proj [nh*(n+r),H] when qr == 0), kv_a_proj_with_mqa [kr+r,H],
//     kv_a_layernorm [kr], kv_b_proj [nh*(n+v),kr], o_proj [H,nh*v];
//   MoE layer: router [E,H]; per expert gate/up [I,H], down [H,I];
//     shared expert gate/up [S,H], down [H,S] when S > 0;
//     Qwen2-MoE shared_expert_gate [1,H]; DeepSeek e_score_correction_bias [E];
//   dense layer: gate/up [D,H], down [H,D].
#ifndef EXPERTD_MODELS_CHECKPOINT_EXPECTED_TENSORS_H_
#define EXPERTD_MODELS_CHECKPOINT_EXPECTED_TENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/config/model_config.h"

namespace expertd::models {

// What a tensor is for (the zoo initialises each role differently).
enum class TensorRole {
  kEmbedding,   // token embeddings
  kLmHead,      // output projection
  kNorm,        // RMSNorm weight (initialised to 1)
  kLinear,      // attention / MLP / expert matrix
  kBias,        // linear bias
  kRouter,      // MoE router (gate) weight
  kRouterBias,  // DeepSeek-V3 score correction bias
  kSharedGate,  // Qwen2-MoE shared-expert gate
};

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role;
  int64_t layer = -1;   // -1 for model-level tensors
  int64_t expert = -1;  // routed expert index, -1 otherwise
};

// Every tensor the config requires, in model order (embeddings, layers in
// order, final norm, lm_head). Names are unique.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

// Names a checkpoint may carry beyond ExpectedTensors (with any shape), which
// the engine ignores unless it looks for them: the pre-gate weights of
// tensor_names.h's PregateName for every layer, "lm_head.weight" when the
// embeddings are tied, and anything under DeepSeek-V3's multi-token-prediction
// layers model.layers.{num_hidden_layers .. + num_nextn_predict_layers - 1}.
// Expert prefetching may extend this list.
bool IsOptionalTensor(const ModelConfig& config, absl::string_view name);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_CHECKPOINT_EXPECTED_TENSORS_H_
