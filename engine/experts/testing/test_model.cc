#include "engine/experts/testing/test_model.h"

#include <cstring>
#include <random>

#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {
namespace {

std::vector<uint8_t> RandomTensor(int64_t numel, models::DType dtype, std::mt19937* rng) {
  std::normal_distribution<float> normal(0, 1);
  std::vector<uint8_t> out(numel * models::DTypeSize(dtype));
  for (int64_t i = 0; i < numel; ++i) {
    const float v = normal(*rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    switch (dtype) {
      case models::DType::kF32:
        std::memcpy(out.data() + 4 * i, &v, 4);
        break;
      case models::DType::kBF16:
      case models::DType::kF16: {  // any 16-bit pattern will do for byte tests
        const uint16_t half = static_cast<uint16_t>(bits >> 16);
        std::memcpy(out.data() + 2 * i, &half, 2);
        break;
      }
      case models::DType::kF8E4M3:  // byte tests only: the code's bits
      case models::DType::kU8:
        out[i] = static_cast<uint8_t>(bits >> 24);
        break;
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<InMemoryWeightSource> MakeTestModel(const TestModelOptions& o) {
  models::ModelConfig c;
  c.architecture = models::Architecture::kQwen3Moe;
  c.model_type = "qwen3_moe";
  c.num_hidden_layers = static_cast<int64_t>(o.is_moe_layer.size());
  c.is_moe_layer = o.is_moe_layer;
  c.num_experts = o.num_experts;
  c.num_experts_per_tok = o.top_k;
  c.hidden_size = o.hidden;
  c.moe_intermediate_size = o.intermediate;
  c.intermediate_size = o.intermediate;
  c.vocab_size = 16;
  c.num_attention_heads = 1;
  c.num_key_value_heads = 1;
  c.head_dim = o.hidden;
  c.torch_dtype = o.dtype;
  auto w = std::make_shared<InMemoryWeightSource>(c);
  std::mt19937 rng(o.seed);
  using models::ExpertProj;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (o.pregates && l + 1 < c.num_hidden_layers) {
      w->Add(models::PregateName(c, l), models::DType::kF32, {o.num_experts, o.hidden},
             RandomTensor(o.num_experts * o.hidden, models::DType::kF32, &rng));
    }
    if (!c.is_moe_layer[l]) continue;
    w->Add(models::RouterName(c, l), models::DType::kF32, {o.num_experts, o.hidden},
           RandomTensor(o.num_experts * o.hidden, models::DType::kF32, &rng));
    for (int64_t e = 0; e < o.num_experts; ++e) {
      const int64_t n = o.intermediate * o.hidden;
      w->Add(models::ExpertWeightName(c, l, e, ExpertProj::kGate), o.dtype,
             {o.intermediate, o.hidden}, RandomTensor(n, o.dtype, &rng));
      w->Add(models::ExpertWeightName(c, l, e, ExpertProj::kUp), o.dtype,
             {o.intermediate, o.hidden}, RandomTensor(n, o.dtype, &rng));
      w->Add(models::ExpertWeightName(c, l, e, ExpertProj::kDown), o.dtype,
             {o.hidden, o.intermediate}, RandomTensor(n, o.dtype, &rng));
    }
  }
  return w;
}

}  // namespace expertd::engine
