#include "models/zoo/zoo_spec.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "models/zoo/zoo_tokenizer.h"
#include "nlohmann/json.hpp"

namespace expertd::models::zoo {
namespace {

using ojson = nlohmann::ordered_json;

absl::Status FieldError(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("zoo spec: ", field, " ", what));
}

// "float32", "bfloat16", "float16"; an FP8 checkpoint says bfloat16 (its
// unquantized tensors' dtype), as DeepSeek-V3's does.
const char* TorchDtype(DType d) { return DTypeName(d == DType::kF8E4M3 ? DType::kBF16 : d); }

// Fields every architecture shares, in transformers' usual order.
ojson CommonFields(const ZooSpec& s, const char* model_type) {
  return {{"architectures", {ArchitectureName(s.arch)}},
          {"model_type", model_type},
          {"vocab_size", s.vocab},
          {"hidden_size", s.hidden},
          {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads},
          {"num_key_value_heads", s.kv_heads},
          {"hidden_act", "silu"},
          {"max_position_embeddings", s.max_position},
          {"initializer_range", 0.02},
          {"use_cache", true},
          {"tie_word_embeddings", s.tie_word_embeddings},
          {"attention_dropout", 0.0},
          {"bos_token_id", kZooBosId},
          {"eos_token_id", kZooEosId},
          {"pad_token_id", kZooPadId},
          {"torch_dtype", TorchDtype(s.dtype)}};
}

int64_t DenseWidth(const ZooSpec& s) {
  return s.intermediate > 0 ? s.intermediate : 2 * s.moe_intermediate;
}
int64_t SharedWidth(const ZooSpec& s) {
  return s.shared_intermediate > 0 ? s.shared_intermediate : 2 * s.moe_intermediate;
}

void AddQwenMoeFields(const ZooSpec& s, ojson* c) {
  ojson& j = *c;
  j["intermediate_size"] = DenseWidth(s);
  j["moe_intermediate_size"] = s.moe_intermediate;
  j["num_experts"] = s.experts;
  j["num_experts_per_tok"] = s.top_k;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = s.mlp_only_layers;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.001;
  j["rms_norm_eps"] = 1e-6;
  j["rope_theta"] = s.arch == Architecture::kQwen3Moe ? 1000000.0 : 10000.0;
  j["rope_scaling"] = nullptr;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = s.layers;
}

// DeepseekV3Config's fields (DeepSeek's published configuration_deepseek.py).
void AddDeepseekV3Fields(const ZooSpec& s, ojson* c) {
  ojson& j = *c;
  j["intermediate_size"] = DenseWidth(s);
  j["moe_intermediate_size"] = s.moe_intermediate;
  j["n_routed_experts"] = s.experts;
  j["n_shared_experts"] = s.shared_experts;
  j["num_experts_per_tok"] = s.top_k;
  j["n_group"] = s.n_group;
  j["topk_group"] = s.topk_group;
  j["topk_method"] = "noaux_tc";
  j["scoring_func"] = "sigmoid";
  j["norm_topk_prob"] = true;
  j["routed_scaling_factor"] = s.routed_scaling_factor;
  j["first_k_dense_replace"] = s.first_k_dense_replace;
  j["moe_layer_freq"] = 1;
  j["num_nextn_predict_layers"] = 0;
  j["aux_loss_alpha"] = 0.001;
  j["seq_aux"] = true;
  j["ep_size"] = 1;
  j["pretraining_tp"] = 1;
  j["q_lora_rank"] = s.q_lora_rank > 0 ? ojson(s.q_lora_rank) : ojson(nullptr);
  j["kv_lora_rank"] = s.kv_lora_rank;
  j["qk_nope_head_dim"] = s.qk_nope_head_dim;
  j["qk_rope_head_dim"] = s.qk_rope_head_dim;
  j["v_head_dim"] = s.v_head_dim;
  j["attention_bias"] = false;
  j["rms_norm_eps"] = 1e-6;
  j["rope_theta"] = 10000.0;
  if (s.yarn_factor > 0) {
    j["rope_scaling"] = {
        {"type", "yarn"},
        {"factor", s.yarn_factor},
        {"original_max_position_embeddings",
         static_cast<int64_t>(static_cast<double>(s.max_position) / s.yarn_factor)},
        {"beta_fast", 32},
        {"beta_slow", 1},
        {"mscale", 1.0},
        {"mscale_all_dim", 1.0}};
  } else {
    j["rope_scaling"] = nullptr;
  }
}

// MLA and routing defaults for a generic preset's sizes (zoo_spec.h).
void SetDeepseekDefaults(ZooSpec* s) {
  const int64_t d = s->hidden / s->heads;
  s->kv_heads = s->heads;
  s->qk_nope_head_dim = d, s->qk_rope_head_dim = d / 2, s->v_head_dim = d;
  s->kv_lora_rank = 2 * d, s->q_lora_rank = 3 * d;
  s->n_group = 4, s->topk_group = 2;
  s->shared_experts = 1;
  s->first_k_dense_replace = 1;
  s->yarn_factor = 4;
}

absl::Status ValidateDeepseekFields(const ZooSpec& s) {
  for (const auto& [name, v] :
       std::vector<std::pair<const char*, int64_t>>{{"kv_lora_rank", s.kv_lora_rank},
                                                    {"qk_nope_head_dim", s.qk_nope_head_dim},
                                                    {"qk_rope_head_dim", s.qk_rope_head_dim},
                                                    {"v_head_dim", s.v_head_dim},
                                                    {"n_group", s.n_group},
                                                    {"topk_group", s.topk_group}}) {
    if (v < 1) return FieldError(name, absl::StrCat("must be >= 1, got ", v));
  }
  if (s.q_lora_rank < 0) return FieldError("q_lora_rank", "must be >= 0 (0: a plain q_proj)");
  if (s.kv_heads != s.heads)
    return FieldError("kv_heads", "must equal heads (latent attention has no kv heads)");
  if (s.head_dim != 0) return FieldError("head_dim", "is not used by deepseek_v3 (MLA dims are)");
  if (s.qk_rope_head_dim % 2 != 0) return FieldError("qk_rope_head_dim", "must be even (RoPE)");
  if (s.experts % s.n_group != 0) return FieldError("n_group", "must divide experts");
  if (s.experts / s.n_group < 2) {
    return FieldError("n_group",
                      "leaves groups of one expert (a group scores its top two experts)");
  }
  if (s.topk_group > s.n_group) return FieldError("topk_group", "exceeds n_group");
  if (s.top_k > s.topk_group * (s.experts / s.n_group)) {
    return FieldError("top_k", "exceeds the experts of the topk_group groups kept");
  }
  if (s.shared_experts < 0 || s.shared_experts > 64)
    return FieldError("shared_experts", "must be in [0, 64]");
  if (s.first_k_dense_replace < 0 || s.first_k_dense_replace > s.layers)
    return FieldError("first_k_dense_replace", "must be in [0, layers]");
  if (s.yarn_factor != 0 && !(s.yarn_factor >= 1 && s.max_position / s.yarn_factor >= 1))
    return FieldError("yarn_factor", "must be 0 (none) or in [1, max_position]");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Architecture> ParseZooArch(const std::string& name) {
  for (Architecture a : {Architecture::kMixtral, Architecture::kQwen2Moe, Architecture::kQwen3Moe,
                         Architecture::kOlmoe, Architecture::kDeepseekV3}) {
    if (name == ZooArchName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown zoo architecture '", name,
                   "' (choose mixtral, qwen2_moe, qwen3_moe, olmoe or deepseek_v3)"));
}

const char* ZooArchName(Architecture arch) {
  switch (arch) {
    case Architecture::kMixtral:
      return "mixtral";
    case Architecture::kQwen2Moe:
      return "qwen2_moe";
    case Architecture::kQwen3Moe:
      return "qwen3_moe";
    case Architecture::kOlmoe:
      return "olmoe";
    case Architecture::kDeepseekV3:
      return "deepseek_v3";
    case Architecture::kGptOss:  // not in the zoo (ParseZooArch refuses it)
      return "gpt_oss";
  }
  return "?";
}

std::vector<std::string> PresetNames() {
  return {"tiny", "default", "olmoe_1b7b_4l", "qwen3_30b_a3b_2l", "deepseek_v3_2l"};
}

absl::StatusOr<ZooSpec> PresetSpec(const std::string& preset, Architecture arch) {
  ZooSpec s;  // the defaults are the "default" preset
  s.arch = arch;
  if (preset == "deepseek_v3_2l") {
    if (arch != Architecture::kDeepseekV3)
      return absl::InvalidArgumentError("zoo preset 'deepseek_v3_2l' needs --arch=deepseek_v3");
    s.hidden = 7168, s.layers = 2, s.heads = 128, s.kv_heads = 128, s.vocab = 2048;
    s.intermediate = 18432, s.moe_intermediate = 2048, s.experts = 256, s.top_k = 8;
    s.n_group = 8, s.topk_group = 4, s.shared_experts = 1, s.first_k_dense_replace = 1;
    s.q_lora_rank = 1536, s.kv_lora_rank = 512;
    s.qk_nope_head_dim = 128, s.qk_rope_head_dim = 64, s.v_head_dim = 128;
    s.max_position = 163840, s.yarn_factor = 40;  // over 4096 positions, as V3
    return s;
  }
  if (preset == "qwen3_30b_a3b_2l") {
    if (arch != Architecture::kQwen3Moe)
      return absl::InvalidArgumentError("zoo preset 'qwen3_30b_a3b_2l' needs --arch=qwen3_moe");
    // Qwen3-30B-A3B's config.json, at 2 of its 48 layers and the zoo's vocab.
    s.hidden = 2048, s.layers = 2, s.experts = 128, s.top_k = 8, s.moe_intermediate = 768;
    s.intermediate = 6144, s.heads = 32, s.kv_heads = 4, s.head_dim = 128, s.vocab = 2048;
    return s;
  }
  if (preset == "tiny") {
    s.hidden = 64, s.layers = 2, s.experts = 8, s.top_k = 2, s.moe_intermediate = 64;
    s.heads = 4, s.kv_heads = 2, s.vocab = 512, s.max_position = 512, s.dtype = DType::kF32;
  } else if (preset == "olmoe_1b7b_4l") {
    s.hidden = 2048, s.layers = 4, s.experts = 64, s.top_k = 8, s.moe_intermediate = 1024;
    s.heads = 16, s.kv_heads = 16, s.vocab = 2048;
  } else if (preset != "default") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown zoo preset '", preset,
                     "' (choose tiny, default, olmoe_1b7b_4l, qwen3_30b_a3b_2l or "
                     "deepseek_v3_2l)"));
  }
  if (arch == Architecture::kDeepseekV3) SetDeepseekDefaults(&s);
  return s;
}

absl::Status ValidateZooSpec(const ZooSpec& s) {
  for (const auto& [name, v] :
       std::vector<std::pair<const char*, int64_t>>{{"hidden", s.hidden},
                                                    {"layers", s.layers},
                                                    {"experts", s.experts},
                                                    {"top_k", s.top_k},
                                                    {"moe_intermediate", s.moe_intermediate},
                                                    {"heads", s.heads},
                                                    {"kv_heads", s.kv_heads},
                                                    {"max_position", s.max_position},
                                                    {"shards", s.shards}}) {
    if (v < 1) return FieldError(name, absl::StrCat("must be >= 1, got ", v));
  }
  if (s.hidden > 65536 || s.moe_intermediate > 65536 || s.layers > 1024 || s.experts > 4096) {
    return FieldError("size", "is unreasonably large for a generated model");
  }
  if (s.top_k > s.experts)
    return FieldError("top_k", absl::StrCat("(", s.top_k, ") exceeds experts (", s.experts, ")"));
  if (s.arch == Architecture::kDeepseekV3) {
    RETURN_IF_ERROR(ValidateDeepseekFields(s));
  } else {
    if (s.heads % s.kv_heads != 0) return FieldError("kv_heads", "must divide heads");
    if (s.head_dim == 0 && s.hidden % s.heads != 0)
      return FieldError("heads", "must divide hidden");
    if (s.head_dim != 0 && s.head_dim != s.hidden / s.heads && s.arch != Architecture::kQwen3Moe) {
      return FieldError("head_dim", "may differ from hidden / heads only for qwen3_moe");
    }
    if (s.head_dim < 0 || s.resolved_head_dim() % 2 != 0)
      return FieldError("head_dim", "must be even (RoPE)");
  }
  if (s.vocab < kZooMinVocab) return FieldError("vocab", absl::StrCat("must be >= ", kZooMinVocab));
  if (s.shards > s.layers + 2) return FieldError("shards", "exceeds the number of layers + 2");
  for (int64_t l : s.mlp_only_layers) {
    if (l < 0 || l >= s.layers)
      return FieldError("mlp_only_layers", absl::StrCat("holds ", l, ", not a layer"));
  }
  if (!s.mlp_only_layers.empty() && s.arch != Architecture::kQwen2Moe &&
      s.arch != Architecture::kQwen3Moe) {
    return FieldError("mlp_only_layers", "is supported only for qwen2_moe and qwen3_moe");
  }
  return absl::OkStatus();
}

std::string ConfigJson(const ZooSpec& s) {
  ojson c = CommonFields(s, ZooArchName(s.arch));
  switch (s.arch) {
    case Architecture::kMixtral:
      c["intermediate_size"] = s.moe_intermediate;  // Mixtral's experts use intermediate_size
      c["num_local_experts"] = s.experts;
      c["num_experts_per_tok"] = s.top_k;
      c["output_router_logits"] = false;
      c["router_aux_loss_coef"] = 0.001;
      c["router_jitter_noise"] = 0.0;
      c["rms_norm_eps"] = 1e-5;
      c["rope_theta"] = 1000000.0;
      c["sliding_window"] = nullptr;
      break;
    case Architecture::kQwen2Moe:
      AddQwenMoeFields(s, &c);
      c["shared_expert_intermediate_size"] = SharedWidth(s);
      c["norm_topk_prob"] = false;
      break;
    case Architecture::kQwen3Moe:
      AddQwenMoeFields(s, &c);
      c["head_dim"] = s.resolved_head_dim();
      c["attention_bias"] = false;
      c["norm_topk_prob"] = true;
      break;
    case Architecture::kOlmoe:
      c["intermediate_size"] = s.moe_intermediate;  // OLMoE's experts use intermediate_size
      c["num_experts"] = s.experts;
      c["num_experts_per_tok"] = s.top_k;
      c["output_router_logits"] = false;
      c["router_aux_loss_coef"] = 0.01;
      c["norm_topk_prob"] = false;
      c["rms_norm_eps"] = 1e-5;
      c["rope_theta"] = 10000.0;
      c["rope_scaling"] = nullptr;
      c["attention_bias"] = false;
      c["clip_qkv"] = nullptr;
      break;
    case Architecture::kDeepseekV3:
      AddDeepseekV3Fields(s, &c);
      break;
    case Architecture::kGptOss:  // not in the zoo (ParseZooArch refuses it)
      break;
  }
  if (s.dtype == DType::kF8E4M3) {
    c["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"},
                                {"weight_block_size", {kZooFp8Block, kZooFp8Block}}};
  }
  return c.dump(2) + "\n";
}

std::string GenerationConfigJson(const ZooSpec&) {
  ojson g = {{"_from_model_config", true},
             {"bos_token_id", kZooBosId},
             {"eos_token_id", kZooEosId},
             {"pad_token_id", kZooPadId}};
  return g.dump(2) + "\n";
}

}  // namespace expertd::models::zoo
