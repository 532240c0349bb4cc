#include "engine/backend/cuda/bench/pregate_overlay.h"

#include "models/checkpoint/tensor_names.h"

namespace expertd::engine::cuda_bench {

PregateOverlay::PregateOverlay(std::shared_ptr<const WeightSource> base) : base_(std::move(base)) {
  const models::ModelConfig& c = base_->config();
  for (int64_t layer = 0; layer + 1 < c.num_hidden_layers; ++layer) {
    for (int64_t next = layer + 1; next < c.num_hidden_layers; ++next) {
      if (!c.is_moe_layer[next]) continue;
      const std::string name = models::PregateName(c, layer);
      if (!base_->Has(name)) aliases_[name] = models::RouterName(c, next);
      break;
    }
  }
}

absl::StatusOr<models::TensorView> PregateOverlay::Get(const std::string& name) const {
  auto it = aliases_.find(name);
  return base_->Get(it == aliases_.end() ? name : it->second);
}

}  // namespace expertd::engine::cuda_bench
