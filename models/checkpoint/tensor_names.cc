#include "models/checkpoint/tensor_names.h"

#include "absl/strings/str_cat.h"

namespace expertd::models {
namespace {

std::string Layer(int64_t layer, const char* suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

bool IsMixtral(const ModelConfig& c) { return c.architecture == Architecture::kMixtral; }

const char* ProjName(ExpertProj proj) {
  switch (proj) {
    case ExpertProj::kGate:
      return "gate_proj";
    case ExpertProj::kUp:
      return "up_proj";
    case ExpertProj::kDown:
      return "down_proj";
  }
  return "?";
}

const char* MixtralProjName(ExpertProj proj) {
  switch (proj) {
    case ExpertProj::kGate:
      return "w1";
    case ExpertProj::kUp:
      return "w3";
    case ExpertProj::kDown:
      return "w2";
  }
  return "?";
}

const char* AttnSuffix(AttnTensor t) {
  switch (t) {
    case AttnTensor::kQProj:
      return "self_attn.q_proj.weight";
    case AttnTensor::kKProj:
      return "self_attn.k_proj.weight";
    case AttnTensor::kVProj:
      return "self_attn.v_proj.weight";
    case AttnTensor::kOProj:
      return "self_attn.o_proj.weight";
    case AttnTensor::kQBias:
      return "self_attn.q_proj.bias";
    case AttnTensor::kKBias:
      return "self_attn.k_proj.bias";
    case AttnTensor::kVBias:
      return "self_attn.v_proj.bias";
    case AttnTensor::kOBias:
      return "self_attn.o_proj.bias";
    case AttnTensor::kSinks:
      return "self_attn.sinks";
    case AttnTensor::kQNorm:
      return "self_attn.q_norm.weight";
    case AttnTensor::kKNorm:
      return "self_attn.k_norm.weight";
    case AttnTensor::kQAProj:
      return "self_attn.q_a_proj.weight";
    case AttnTensor::kQALayerNorm:
      return "self_attn.q_a_layernorm.weight";
    case AttnTensor::kQBProj:
      return "self_attn.q_b_proj.weight";
    case AttnTensor::kKvAProjWithMqa:
      return "self_attn.kv_a_proj_with_mqa.weight";
    case AttnTensor::kKvALayerNorm:
      return "self_attn.kv_a_layernorm.weight";
    case AttnTensor::kKvBProj:
      return "self_attn.kv_b_proj.weight";
  }
  return "?";
}

}  // namespace

std::string EmbedTokensName() { return "model.embed_tokens.weight"; }
std::string FinalNormName() { return "model.norm.weight"; }
std::string LmHeadName(const ModelConfig& config) {
  return config.tie_word_embeddings ? EmbedTokensName() : "lm_head.weight";
}

std::string InputNormName(int64_t layer) { return Layer(layer, "input_layernorm.weight"); }
std::string PostAttentionNormName(int64_t layer) {
  return Layer(layer, "post_attention_layernorm.weight");
}
std::string AttentionName(int64_t layer, AttnTensor tensor) {
  return Layer(layer, AttnSuffix(tensor));
}

std::string RouterName(const ModelConfig& config, int64_t layer) {
  if (config.architecture == Architecture::kGptOss) return Layer(layer, "mlp.router.weight");
  return Layer(layer, IsMixtral(config) ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}
std::string RouterLinearBiasName(int64_t layer) { return Layer(layer, "mlp.router.bias"); }
std::string RouterBiasName(int64_t layer) {
  return Layer(layer, "mlp.gate.e_score_correction_bias");
}

std::string ExpertWeightName(const ModelConfig& config, int64_t layer, int64_t expert,
                             ExpertProj proj) {
  if (IsMixtral(config)) {
    return absl::StrCat("model.layers.", layer, ".block_sparse_moe.experts.", expert, ".",
                        MixtralProjName(proj), ".weight");
  }
  return absl::StrCat("model.layers.", layer, ".mlp.experts.", expert, ".", ProjName(proj),
                      ".weight");
}

std::string ExpertBiasName(int64_t layer, int64_t expert, ExpertProj proj) {
  return absl::StrCat("model.layers.", layer, ".mlp.experts.", expert, ".", ProjName(proj),
                      ".bias");
}

std::string Mxfp4ScalesName(const std::string& weight_name) { return weight_name + "_scales"; }

std::string FusedExpertName(int64_t layer, FusedExpertTensor tensor) {
  switch (tensor) {
    case FusedExpertTensor::kGateUp:
      return Layer(layer, "mlp.experts.gate_up_proj");
    case FusedExpertTensor::kGateUpBias:
      return Layer(layer, "mlp.experts.gate_up_proj_bias");
    case FusedExpertTensor::kDown:
      return Layer(layer, "mlp.experts.down_proj");
    case FusedExpertTensor::kDownBias:
      return Layer(layer, "mlp.experts.down_proj_bias");
  }
  return "?";
}

std::string SharedExpertWeightName(const ModelConfig& config, int64_t layer, ExpertProj proj) {
  const char* block =
      config.architecture == Architecture::kDeepseekV3 ? "shared_experts" : "shared_expert";
  return absl::StrCat("model.layers.", layer, ".mlp.", block, ".", ProjName(proj), ".weight");
}
std::string SharedExpertGateName(int64_t layer) {
  return Layer(layer, "mlp.shared_expert_gate.weight");
}

std::string DenseMlpWeightName(int64_t layer, ExpertProj proj) {
  return absl::StrCat("model.layers.", layer, ".mlp.", ProjName(proj), ".weight");
}

std::string PregateName(const ModelConfig& config, int64_t layer) {
  return Layer(layer, IsMixtral(config) ? "block_sparse_moe.pregate.weight" : "mlp.pregate.weight");
}

}  // namespace expertd::models
