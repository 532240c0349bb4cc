#include "engine/bench/synthetic_model.h"

#include "base/status_macros.h"
#include "models/checkpoint/expected_tensors.h"
#include "models/zoo/weight_init.h"

namespace expertd::engine {

absl::StatusOr<std::shared_ptr<InMemoryWeightSource>> SyntheticWeights(
    const models::zoo::ZooSpec& spec) {
  ASSIGN_OR_RETURN(models::ModelConfig config,
                   models::ParseModelConfig(models::zoo::ConfigJson(spec), "synthetic"));
  auto source = std::make_shared<InMemoryWeightSource>(config);
  for (const models::ExpectedTensor& t : models::ExpectedTensors(config)) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    std::vector<uint8_t> bytes(static_cast<size_t>(numel) * models::DTypeSize(spec.dtype));
    models::zoo::FillTensor(spec.seed, t, spec.dtype, bytes.data());
    source->Add(t.name, spec.dtype, t.shape, std::move(bytes));
  }
  return source;
}

uint64_t DecodeBytesTouched(const models::ModelConfig& c, models::DType dtype) {
  const uint64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                 kv = c.num_key_value_heads * c.head_dim;
  uint64_t params = h + h + c.vocab_size * h;  // embedding row, final norm, LM head
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    params += 2 * h;                   // input / post-attention norms
    params += h * q * 2 + h * kv * 2;  // q, o, k, v
    if (c.attention_bias) params += q + 2 * kv;
    if (c.qk_norm == models::QkNorm::kPerHead) params += 2 * c.head_dim;
    if (c.qk_norm == models::QkNorm::kWholeProjection) params += q + kv;
    if (c.is_moe_layer[l]) {
      params += c.num_experts * h;  // router
      params += c.num_experts_per_tok * 3 * h * c.moe_intermediate_size;
      params += 3 * h * c.shared_expert_intermediate_size + (c.shared_expert_gated ? h : 0);
    } else {
      params += 3 * h * c.intermediate_size;
    }
  }
  return params * models::DTypeSize(dtype);
}

}  // namespace expertd::engine
