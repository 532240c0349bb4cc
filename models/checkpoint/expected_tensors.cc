#include "models/checkpoint/expected_tensors.h"

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::models {
namespace {

using Shape = std::vector<int64_t>;

class Builder {
 public:
  explicit Builder(std::vector<ExpectedTensor>* out) : out_(out) {}
  void Add(std::string name, Shape shape, TensorRole role, int64_t layer = -1,
           int64_t expert = -1) {
    out_->push_back({std::move(name), std::move(shape), role, layer, expert});
  }

 private:
  std::vector<ExpectedTensor>* out_;
};

void AddStandardAttention(const ModelConfig& c, int64_t i, Builder& b) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim;
  b.Add(AttentionName(i, AttnTensor::kQProj), {q, h}, TensorRole::kLinear, i);
  b.Add(AttentionName(i, AttnTensor::kKProj), {kv, h}, TensorRole::kLinear, i);
  b.Add(AttentionName(i, AttnTensor::kVProj), {kv, h}, TensorRole::kLinear, i);
  b.Add(AttentionName(i, AttnTensor::kOProj), {h, q}, TensorRole::kLinear, i);
  if (c.attention_bias) {
    b.Add(AttentionName(i, AttnTensor::kQBias), {q}, TensorRole::kBias, i);
    b.Add(AttentionName(i, AttnTensor::kKBias), {kv}, TensorRole::kBias, i);
    b.Add(AttentionName(i, AttnTensor::kVBias), {kv}, TensorRole::kBias, i);
  }
  if (c.attention_out_bias) b.Add(AttentionName(i, AttnTensor::kOBias), {h}, TensorRole::kBias, i);
  if (c.attention_sinks) {
    b.Add(AttentionName(i, AttnTensor::kSinks), {c.num_attention_heads}, TensorRole::kBias, i);
  }
  switch (c.qk_norm) {
    case QkNorm::kNone:
      break;
    case QkNorm::kPerHead:
      b.Add(AttentionName(i, AttnTensor::kQNorm), {c.head_dim}, TensorRole::kNorm, i);
      b.Add(AttentionName(i, AttnTensor::kKNorm), {c.head_dim}, TensorRole::kNorm, i);
      break;
    case QkNorm::kWholeProjection:
      b.Add(AttentionName(i, AttnTensor::kQNorm), {q}, TensorRole::kNorm, i);
      b.Add(AttentionName(i, AttnTensor::kKNorm), {kv}, TensorRole::kNorm, i);
      break;
  }
}

void AddLatentAttention(const ModelConfig& c, int64_t i, Builder& b) {
  const int64_t h = c.hidden_size, nh = c.num_attention_heads;
  const int64_t qk = c.qk_nope_head_dim + c.qk_rope_head_dim;
  if (c.q_lora_rank > 0) {
    b.Add(AttentionName(i, AttnTensor::kQAProj), {c.q_lora_rank, h}, TensorRole::kLinear, i);
    b.Add(AttentionName(i, AttnTensor::kQALayerNorm), {c.q_lora_rank}, TensorRole::kNorm, i);
    b.Add(AttentionName(i, AttnTensor::kQBProj), {nh * qk, c.q_lora_rank}, TensorRole::kLinear, i);
  } else {
    b.Add(AttentionName(i, AttnTensor::kQProj), {nh * qk, h}, TensorRole::kLinear, i);
  }
  b.Add(AttentionName(i, AttnTensor::kKvAProjWithMqa), {c.kv_lora_rank + c.qk_rope_head_dim, h},
        TensorRole::kLinear, i);
  b.Add(AttentionName(i, AttnTensor::kKvALayerNorm), {c.kv_lora_rank}, TensorRole::kNorm, i);
  b.Add(AttentionName(i, AttnTensor::kKvBProj),
        {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, TensorRole::kLinear, i);
  b.Add(AttentionName(i, AttnTensor::kOProj), {h, nh * c.v_head_dim}, TensorRole::kLinear, i);
}

void AddMoe(const ModelConfig& c, int64_t i, Builder& b) {
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size;
  b.Add(RouterName(c, i), {c.num_experts, h}, TensorRole::kRouter, i);
  if (c.router_scoring == RouterScoring::kSigmoid) {
    b.Add(RouterBiasName(i), {c.num_experts}, TensorRole::kRouterBias, i);
  }
  if (c.router_bias) b.Add(RouterLinearBiasName(i), {c.num_experts}, TensorRole::kBias, i);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    b.Add(ExpertWeightName(c, i, e, ExpertProj::kGate), {inter, h}, TensorRole::kLinear, i, e);
    b.Add(ExpertWeightName(c, i, e, ExpertProj::kUp), {inter, h}, TensorRole::kLinear, i, e);
    b.Add(ExpertWeightName(c, i, e, ExpertProj::kDown), {h, inter}, TensorRole::kLinear, i, e);
    if (c.expert_bias) {
      b.Add(ExpertBiasName(i, e, ExpertProj::kGate), {inter}, TensorRole::kBias, i, e);
      b.Add(ExpertBiasName(i, e, ExpertProj::kUp), {inter}, TensorRole::kBias, i, e);
      b.Add(ExpertBiasName(i, e, ExpertProj::kDown), {h}, TensorRole::kBias, i, e);
    }
  }
  const int64_t s = c.shared_expert_intermediate_size;
  if (s > 0) {
    b.Add(SharedExpertWeightName(c, i, ExpertProj::kGate), {s, h}, TensorRole::kLinear, i);
    b.Add(SharedExpertWeightName(c, i, ExpertProj::kUp), {s, h}, TensorRole::kLinear, i);
    b.Add(SharedExpertWeightName(c, i, ExpertProj::kDown), {h, s}, TensorRole::kLinear, i);
  }
  if (c.shared_expert_gated) b.Add(SharedExpertGateName(i), {1, h}, TensorRole::kSharedGate, i);
}

void AddDenseMlp(const ModelConfig& c, int64_t i, Builder& b) {
  const int64_t h = c.hidden_size, d = c.intermediate_size;
  b.Add(DenseMlpWeightName(i, ExpertProj::kGate), {d, h}, TensorRole::kLinear, i);
  b.Add(DenseMlpWeightName(i, ExpertProj::kUp), {d, h}, TensorRole::kLinear, i);
  b.Add(DenseMlpWeightName(i, ExpertProj::kDown), {h, d}, TensorRole::kLinear, i);
}

}  // namespace

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  Builder b(&out);
  b.Add(EmbedTokensName(), {c.vocab_size, c.hidden_size}, TensorRole::kEmbedding);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    b.Add(InputNormName(i), {c.hidden_size}, TensorRole::kNorm, i);
    if (c.uses_mla())
      AddLatentAttention(c, i, b);
    else
      AddStandardAttention(c, i, b);
    b.Add(PostAttentionNormName(i), {c.hidden_size}, TensorRole::kNorm, i);
    const bool moe = i < static_cast<int64_t>(c.is_moe_layer.size()) && c.is_moe_layer[i];
    if (moe)
      AddMoe(c, i, b);
    else
      AddDenseMlp(c, i, b);
  }
  b.Add(FinalNormName(), {c.hidden_size}, TensorRole::kNorm);
  if (!c.tie_word_embeddings)
    b.Add(LmHeadName(c), {c.vocab_size, c.hidden_size}, TensorRole::kLmHead);
  return out;
}

bool IsOptionalTensor(const ModelConfig& c, absl::string_view name) {
  // Some tied checkpoints still store the (identical) head; it is unused.
  if (c.tie_word_embeddings && name == "lm_head.weight") return true;
  // "model.layers.{i}.<suffix>" with i a valid layer and suffix the pre-gate's.
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, "model.layers.")) return false;
  const size_t dot = rest.find('.');
  if (dot == absl::string_view::npos) return false;
  int64_t layer = 0;
  if (!absl::SimpleAtoi(rest.substr(0, dot), &layer) || layer < 0) return false;
  // DeepSeek-V3's multi-token-prediction layers follow the decoder layers.
  if (layer >= c.num_hidden_layers) return layer < c.num_hidden_layers + c.num_nextn_predict_layers;
  return name == PregateName(c, layer);
}

}  // namespace expertd::models
