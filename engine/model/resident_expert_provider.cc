#include "engine/model/resident_expert_provider.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace expertd::engine {

absl::StatusOr<std::unique_ptr<ExpertProvider>> ResidentExpertProvider::Create(
    const ExpertProviderContext& ctx) {
  const models::ModelConfig& c = *ctx.config;
  std::unique_ptr<ResidentExpertProvider> p(new ResidentExpertProvider(ctx.backend, ctx.weights));
  p->num_experts_ = c.num_experts;
  p->experts_.resize(c.num_hidden_layers * c.num_experts);
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    if (!c.is_moe_layer[layer]) continue;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      ExpertTensorNames names =
          ExpertTensorNamesFor(c, static_cast<int>(layer), static_cast<int>(e));
      ExpertWeights& w = p->experts_[layer * c.num_experts + e];
      ASSIGN_OR_RETURN(w.gate, p->store_.Load(names.gate, inter, h));
      ASSIGN_OR_RETURN(w.up, p->store_.Load(names.up, inter, h));
      ASSIGN_OR_RETURN(w.down, p->store_.Load(names.down, h, inter));
    }
  }
  return std::unique_ptr<ExpertProvider>(std::move(p));
}

absl::StatusOr<ExpertWeights> ResidentExpertProvider::Acquire(int layer, int expert) {
  const size_t index = static_cast<size_t>(layer) * num_experts_ + expert;
  if (expert < 0 || expert >= num_experts_ || index >= experts_.size() ||
      experts_[index].gate.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no routed expert ", expert, " in layer ", layer));
  }
  return experts_[index];
}

ExpertProviderFactory ResidentExpertProviderFactory() {
  return [](const ExpertProviderContext& ctx) { return ResidentExpertProvider::Create(ctx); };
}

}  // namespace expertd::engine
