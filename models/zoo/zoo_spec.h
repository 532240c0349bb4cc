// ZooSpec: the shape of a model the zoo generates, its presets, and the
// Hugging Face config.json / generation_config.json it is described by.
//
// config.json uses exactly transformers' field names for each architecture
// (MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig, OlmoeConfig), so the
// directory loads in transformers as well as in expertd; DeepSeek-V3 uses
// the field names of DeepSeek's published DeepseekV3Config.
//
// Presets (tiny, default and olmoe_1b7b_4l for any architecture; the zoo's
// default architecture is qwen3_moe):
//   tiny           hidden 64, 2 layers, 8 experts top-2 of width 64, 4 heads /
//                  2 kv, vocab 512, f32 -- unit tests.
//   default        hidden 256, 4 layers, 16 experts top-4 of width 256, 8 heads
//                  / 2 kv (head_dim 32), vocab 2048, bf16 -- what `serve`
//                  runs out of the box on a CPU (~29 MB).
//   olmoe_1b7b_4l  OLMoE-1B-7B's layer shapes: hidden 2048, 64 experts top-8
//                  of width 1024, 16 heads / 16 kv, 4 layers, vocab 2048, bf16
//                  (~3.3 GB) -- benchmarks.
//   qwen3_30b_a3b_2l (qwen3_moe only) Qwen3-30B-A3B's layer shapes: hidden
//                  2048, 128 experts top-8 of width 768, 32 heads / 4 kv of
//                  head_dim 128 (q width 4096), dense MLP width 6144 (unused:
//                  no dense layer), 2 layers, vocab 2048 (the real 151936 is
//                  past what the zoo tokenizer's corpus trains; in-memory
//                  benchmarks set it), bf16 (~2.5 GB) -- benchmarks.
//   deepseek_v3_2l (deepseek_v3 only) DeepSeek-V3's layer shapes at full
//                  width: hidden 7168, 128 heads, MLA (q_lora_rank 1536,
//                  kv_lora_rank 512, qk dims 128 + 64 rope, v 128), YaRN
//                  factor 40 over 4096 positions, 256 experts top-8 of width
//                  2048 in 8 groups (4 kept), 1 shared expert, dense MLP 18432;
//                  2 layers (the first dense, first_k_dense_replace 1), vocab
//                  2048, bf16 (~23 GB; ~12 GB with --dtype=fp8) -- offloading
//                  benchmarks.
// For deepseek_v3 the generic presets keep their sizes, with kv_heads = heads
// and MLA dimensions from the head width (hidden / heads = d: nope d, rope
// d / 2, v d, kv_lora_rank 2d, q_lora_rank 3d; tiny is then the reference
// fixture's attention), n_group 4 / topk_group 2, one shared expert, the
// first layer dense, YaRN factor 4.
#ifndef EXPERTD_MODELS_ZOO_ZOO_SPEC_H_
#define EXPERTD_MODELS_ZOO_ZOO_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/config/model_config.h"

namespace expertd::models::zoo {

struct ZooSpec {
  Architecture arch = Architecture::kQwen3Moe;
  int64_t hidden = 256;
  int64_t layers = 4;
  int64_t experts = 16;
  int64_t top_k = 4;
  int64_t moe_intermediate = 256;   // routed expert width
  int64_t intermediate = 0;         // Qwen dense-layer MLP width; 0 = 2 * moe_intermediate
  int64_t shared_intermediate = 0;  // Qwen2-MoE shared expert width; 0 = 2 * moe_intermediate
  int64_t heads = 8;
  int64_t kv_heads = 2;
  int64_t head_dim = 0;  // 0 = hidden / heads (only Qwen3-MoE may differ)
  int64_t vocab = 2048;  // == the generated tokenizer's size
  int64_t max_position = 4096;
  std::vector<int64_t> mlp_only_layers;  // Qwen2/Qwen3-MoE dense layers
  bool tie_word_embeddings = false;
  // kF8E4M3: block-scaled FP8 as DeepSeek-V3 is published -- every Linear
  // weight in E4M3 with an F32 `<name>_scale_inv` per 128 x 128 block, the
  // embeddings, norms, routers and lm_head in bf16, and a quantization_config.
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  int64_t shards = 1;  // > 1: model-0000i-of-0000N.safetensors + index

  // DeepSeek-V3 only. Multi-head latent attention (q_lora_rank 0: a plain
  // q_proj, as DeepSeek-V2-Lite), grouped sigmoid routing (noaux_tc),
  // shared experts of the routed width, dense leading layers, YaRN.
  int64_t q_lora_rank = 0, kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  int64_t n_group = 1, topk_group = 1;
  int64_t shared_experts = 0;
  int64_t first_k_dense_replace = 0;
  double routed_scaling_factor = 2.5;
  double yarn_factor = 0;  // 0: no rope scaling; else over max_position / factor positions

  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden / heads; }
};

// The FP8 block (rows and columns) of --dtype=fp8 checkpoints, as DeepSeek-V3's.
inline constexpr int64_t kZooFp8Block = 128;

// "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3" (the HF model_type).
absl::StatusOr<Architecture> ParseZooArch(const std::string& name);
const char* ZooArchName(Architecture arch);

// A preset's spec for `arch`. InvalidArgument naming the preset if unknown.
absl::StatusOr<ZooSpec> PresetSpec(const std::string& preset, Architecture arch);
std::vector<std::string> PresetNames();

// Checks the spec is generatable (sizes positive, heads divisible, vocab in
// the tokenizer's range, ...); InvalidArgument naming the field.
absl::Status ValidateZooSpec(const ZooSpec& spec);

// config.json and generation_config.json text (deterministic).
std::string ConfigJson(const ZooSpec& spec);
std::string GenerationConfigJson(const ZooSpec& spec);

}  // namespace expertd::models::zoo

#endif  // EXPERTD_MODELS_ZOO_ZOO_SPEC_H_
