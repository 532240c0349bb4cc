// ModelConfig: a Hugging Face config.json, parsed and validated into the plain
// struct the engine and server use. Knows file formats only (no devices).
//
// Supported architectures (config.json "architectures"[0]):
//   MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM,
//   OlmoeForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM (parsed here; the engine decides
//   whether it can run it). Anything else, or a field value the engine cannot
//   honour (hidden_act other than silu, Qwen's use_sliding_window, an unknown
//   rope_scaling type, ...), is an InvalidArgument error naming the field.
#ifndef EXPERTD_MODELS_CONFIG_MODEL_CONFIG_H_
#define EXPERTD_MODELS_CONFIG_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/dtype/dtype.h"

namespace expertd::models {

enum class Architecture { kMixtral, kQwen2Moe, kQwen3Moe, kOlmoe, kDeepseekV3, kGptOss };

// The HF class name, e.g. "MixtralForCausalLM".
const char* ArchitectureName(Architecture arch);

// Where the query/key RMSNorm (if any) is applied.
enum class QkNorm {
  kNone,
  kPerHead,         // Qwen3-MoE: RMSNorm over head_dim, weights [head_dim]
  kWholeProjection  // OLMoE: RMSNorm over the full q (heads*head_dim) / k projection
};

// How router logits become expert weights.
enum class RouterScoring {
  kSoftmax,  // softmax over all experts, top-k, optional renormalisation
  kSigmoid   // DeepSeek-V3: sigmoid scores + correction bias, grouped top-k
};

enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;          // yarn, llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double mscale = 1.0, mscale_all_dim = 0.0;             // yarn (DeepSeek)
  // yarn: round the correction range outward to whole dimensions (false in
  // gpt-oss' config, "truncate": false).
  bool truncate = true;
};

// config.json "quantization_config" of an FP8 checkpoint (DeepSeek-V3/R1):
// {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}.
// Each FP8 weight W [rows, cols] has a `<name>_scale_inv` tensor (F32 or
// BF16) of [ceil(rows / block_rows), ceil(cols / block_cols)], and
// W[i, j] = float(fp8[i, j]) * scale_inv[i / block_rows, j / block_cols]
// (edge blocks may be partial). Unquantized tensors (embeddings, norms, the
// router, lm_head) stay in their 16/32-bit dtype.
struct Fp8BlockQuantization {
  bool enabled = false;
  int64_t block_rows = 128, block_cols = 128;
};

// Weight storage type named by config.json's torch_dtype (informational: each
// tensor in the checkpoint carries its own dtype).

struct ModelConfig {
  Architecture architecture = Architecture::kMixtral;
  std::string model_type;  // config.json "model_type", e.g. "qwen2_moe"

  // Transformer shape.
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;           // hidden_size / heads unless given
  int64_t intermediate_size = 0;  // dense MLP width (dense layers)
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;      // q/k/v projections carry a bias (Qwen2-MoE: always)
  bool attention_out_bias = false;  // so does o_proj (gpt-oss)
  // gpt-oss: one learned logit per query head (self_attn.sinks [heads]) in
  // every softmax's denominator (AttentionParams::sinks).
  bool attention_sinks = false;
  QkNorm qk_norm = QkNorm::kNone;
  double clip_qkv = 0.0;  // OLMoE: clamp q/k/v to [-c, c]; 0 = off
  // Sliding-window attention (Mixtral's "sliding_window"): a query sees the
  // last sliding_window keys, itself included; 0 = every key. Per layer:
  // sliding_layers[i] (every layer for Mixtral).
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;

  // Mixture of experts.
  int64_t num_experts = 0;            // routed experts per MoE layer
  int64_t num_experts_per_tok = 0;    // top-k
  int64_t moe_intermediate_size = 0;  // routed expert width
  bool norm_topk_prob = false;        // renormalise the top-k weights to sum to 1
  RouterScoring router_scoring = RouterScoring::kSoftmax;
  int64_t shared_expert_intermediate_size = 0;  // 0 = no shared expert
  bool shared_expert_gated = false;  // Qwen2-MoE: sigmoid(shared_expert_gate(x)) scales it
  std::vector<bool> is_moe_layer;    // per layer: routed experts (true) or dense MLP
  double router_aux_loss_coef = 0.0;
  // gpt-oss: the router Linear has a bias, and the routed experts' gate, up
  // and down projections too; their activation is the clamped SwiGLU
  //   (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit)
  // (swiglu_limit 0: the plain silu(gate) * up of every other architecture).
  bool router_bias = false;
  bool expert_bias = false;
  double swiglu_limit = 0.0;
  double swiglu_alpha = 1.0;
  // DeepSeek-V3 routing (router_scoring == kSigmoid).
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  std::string topk_method;  // "noaux_tc" (V3), "greedy", "group_limited_greedy"
  // Multi-token-prediction layers stored after the decoder layers
  // (model.layers.{num_hidden_layers + i}.*); plain decoding does not use them.
  int64_t num_nextn_predict_layers = 0;
  // DeepSeek-V3 multi-head latent attention (0 when not MLA).
  int64_t q_lora_rank = 0, kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;

  // Tokens.
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;  // -1 = none
  int32_t pad_token_id = -1;

  DType torch_dtype = DType::kF32;
  Fp8BlockQuantization fp8;

  bool uses_mla() const { return kv_lora_rank > 0; }
  // Layer i's attention window (AttentionParams::window): 0 = every key.
  int64_t AttentionWindow(int64_t layer) const {
    return sliding_window > 0 && sliding_layers[layer] ? sliding_window : 0;
  }
  int64_t num_moe_layers() const;
  // Parameter counts (elements), from the shapes above.
  int64_t ExpertParamsPerExpert() const;  // gate+up+down of one routed expert
  int64_t TotalExpertParams() const;      // all routed experts, all layers
  int64_t TotalParams() const;            // everything
  int64_t ActiveParamsPerToken() const;   // dense + top-k experts
};

// Parses config.json text. `source` names the file in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json,
                                             absl::string_view source = "config.json");

// Reads and parses `path` (a config.json file).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Applies generation_config.json (optional file): currently its eos_token_id /
// bos_token_id / pad_token_id override the config's. Missing file is OK.
absl::Status ApplyGenerationConfig(const std::string& path, ModelConfig* config);
// The same from the file's text; `source` names it in errors.
absl::Status ApplyGenerationConfigJson(absl::string_view text, absl::string_view source,
                                       ModelConfig* config);

// The generation_config.json transformers writes for a model directory that
// has none (GenerationConfig.from_model_config, then save_pretrained): the
// bos/eos/pad token ids config.json sets (eos as a number or a list, as
// given) and "_from_model_config": true, keys sorted, 2-space indent. No
// "transformers_version": no transformers wrote it. `config_json` is
// config.json's text; InvalidArgument naming `source` when it is not a JSON
// object.
absl::StatusOr<std::string> GenerationConfigFromModelConfig(
    absl::string_view config_json, absl::string_view source = "config.json");

}  // namespace expertd::models

#endif  // EXPERTD_MODELS_CONFIG_MODEL_CONFIG_H_
