#include "engine/experts/bench/skewed_weight_source.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "models/checkpoint/tensor_names.h"
#include "models/dtype/dtype.h"

namespace expertd::engine {

SkewedWeightSource::SkewedWeightSource(std::shared_ptr<const WeightSource> base, double skew,
                                       uint32_t seed)
    : base_(std::move(base)) {
  const models::ModelConfig& c = base_->config();
  std::mt19937 rng(seed);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (!c.is_moe_layer[layer] || skew <= 0) continue;
    const std::string name = models::RouterName(c, layer);
    auto v = base_->Get(name);
    if (!v.ok()) continue;  // the engine reports the missing router itself
    const int64_t experts = c.num_experts, hidden = c.hidden_size;
    std::vector<float> w(experts * hidden);
    models::ConvertToF32(v->dtype, v->data, w.data(), w.size());
    std::vector<int32_t> rank(experts);
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);  // rank[e] = popularity rank of expert e
    for (int64_t e = 0; e < experts; ++e) {
      const float scale = static_cast<float>(std::pow(rank[e] + 1.0, -skew / 2));
      for (int64_t i = 0; i < hidden; ++i) w[e * hidden + i] *= scale;
    }
    routers_[name] = std::move(w);
  }
}

absl::StatusOr<models::TensorView> SkewedWeightSource::Get(const std::string& name) const {
  auto it = routers_.find(name);
  if (it == routers_.end()) return base_->Get(name);
  models::TensorView v;
  v.name = name;
  v.dtype = models::DType::kF32;
  v.shape = {base_->config().num_experts, base_->config().hidden_size};
  v.data = it->second.data();
  v.nbytes = it->second.size() * sizeof(float);
  v.file = "<skewed>";
  return v;
}

}  // namespace expertd::engine
