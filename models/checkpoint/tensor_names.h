// The Hugging Face tensor names of every supported architecture, in one place,
// so the engine (and the zoo, and validation) never spell them by hand.
//
//   model.embed_tokens.weight                        [V, H]
//   model.norm.weight                                [H]
//   lm_head.weight                                   [V, H]  (absent when tied)
//   model.layers.{i}.input_layernorm.weight          [H]
//   model.layers.{i}.post_attention_layernorm.weight [H]
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ .bias, q_norm, k_norm)
//   MLA (DeepSeek-V3): self_attn.{q_a_proj, q_a_layernorm, q_b_proj,
//                      kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}
//   Mixtral MoE:   block_sparse_moe.gate.weight, block_sparse_moe.experts.{e}.{w1,w3,w2}.weight
//   Others' MoE:   mlp.gate.weight, mlp.experts.{e}.{gate,up,down}_proj.weight
//   Shared expert: mlp.shared_expert.* + mlp.shared_expert_gate.weight (Qwen2-MoE),
//                  mlp.shared_experts.* (DeepSeek-V3)
//   Dense MLP:     mlp.{gate,up,down}_proj.weight
//   gpt-oss:       self_attn.o_proj.bias, self_attn.sinks, mlp.router.{weight,bias},
//                  and in the file mlp.experts.{gate_up_proj, gate_up_proj_bias,
//                  down_proj, down_proj_bias} for all experts at once, which the
//                  Checkpoint presents as mlp.experts.{e}.{gate,up,down}_proj.{weight,bias}
//                  (gpt_oss_experts.h)
//
// All functions are pure; layer / expert indices are not range-checked here.
#ifndef EXPERTD_MODELS_CHECKPOINT_TENSOR_NAMES_H_
#define EXPERTD_MODELS_CHECKPOINT_TENSOR_NAMES_H_

#include <cstdint>
#include <string>

#include "models/config/model_config.h"

namespace expertd::models {

// The three matrices of a SwiGLU MLP: down(silu(gate(x)) * up(x)).
// Mixtral calls them w1 (gate), w3 (up), w2 (down).
enum class ExpertProj { kGate, kUp, kDown };

enum class AttnTensor {
  kQProj,
  kKProj,
  kVProj,
  kOProj,  // weights
  kQBias,
  kKBias,
  kVBias,  // when config.attention_bias
  kOBias,  // when config.attention_out_bias (gpt-oss)
  kSinks,  // gpt-oss: [heads]
  kQNorm,
  kKNorm,  // Qwen3-MoE / OLMoE
  // DeepSeek-V3 multi-head latent attention (kOProj is shared with the above).
  kQAProj,
  kQALayerNorm,
  kQBProj,
  kKvAProjWithMqa,
  kKvALayerNorm,
  kKvBProj,
};

std::string EmbedTokensName();  // "model.embed_tokens.weight"
std::string FinalNormName();    // "model.norm.weight"
// "lm_head.weight", or the embedding's name when config.tie_word_embeddings.
std::string LmHeadName(const ModelConfig& config);

std::string InputNormName(int64_t layer);          // before attention
std::string PostAttentionNormName(int64_t layer);  // before the MLP / MoE block
std::string AttentionName(int64_t layer, AttnTensor tensor);

// The router (gate) of a MoE layer: [num_experts, hidden].
std::string RouterName(const ModelConfig& config, int64_t layer);
// DeepSeek-V3's router score correction bias: [num_experts] (fp32 in real checkpoints).
std::string RouterBiasName(int64_t layer);
// gpt-oss' router Linear bias: [num_experts].
std::string RouterLinearBiasName(int64_t layer);
// Routed expert `expert`'s matrices: gate/up [moe_intermediate, H], down [H, moe_intermediate].
std::string ExpertWeightName(const ModelConfig& config, int64_t layer, int64_t expert,
                             ExpertProj proj);
// Their biases (config.expert_bias, gpt-oss): gate/up [moe_intermediate], down [H].
std::string ExpertBiasName(int64_t layer, int64_t expert, ExpertProj proj);
// An expert matrix kept in MXFP4 (gpt-oss as OpenAI publishes it) is a uint8
// tensor [rows, cols / 2] of e2m1 codes under the matrix's own name, and its
// e8m0 block scales, uint8 [rows, cols / 32], under this name:
// "<weight name>_scales".
std::string Mxfp4ScalesName(const std::string& weight_name);
// gpt-oss' fused expert tensors as stored: gate_up_proj [E, H, 2I] (gate and
// up interleaved along the last axis: column 2i is gate row i, 2i + 1 up row
// i), gate_up_proj_bias [E, 2I], down_proj [E, I, H], down_proj_bias [E, H].
enum class FusedExpertTensor { kGateUp, kGateUpBias, kDown, kDownBias };
std::string FusedExpertName(int64_t layer, FusedExpertTensor tensor);
// The shared expert (Qwen2-MoE "shared_expert", DeepSeek-V3 "shared_experts"):
// gate/up [shared_expert_intermediate_size, H], down [H, shared_expert_intermediate_size].
std::string SharedExpertWeightName(const ModelConfig& config, int64_t layer, ExpertProj proj);
// Qwen2-MoE's sigmoid gate on the shared expert: [1, H].
std::string SharedExpertGateName(int64_t layer);
// A dense (non-MoE) layer's MLP: gate/up [intermediate_size, H], down [H, intermediate_size].
std::string DenseMlpWeightName(int64_t layer, ExpertProj proj);

// Optional pre-gate weights stored in layer `layer` that predict the NEXT MoE
// layer's experts (Pre-gated MoE): "model.layers.{i}.mlp.pregate.weight"
// (Mixtral: "model.layers.{i}.block_sparse_moe.pregate.weight"). Their shape is
// defined by the prefetch code; validation accepts these names with any shape.
std::string PregateName(const ModelConfig& config, int64_t layer);

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_CHECKPOINT_TENSOR_NAMES_H_
