// ResidentExpertProvider: every routed expert of every MoE layer is loaded
// into device memory at creation and stays there (the baseline, and the
// reference the offloading providers (engine/experts) must match bitwise).
#ifndef EXPERTD_ENGINE_MODEL_RESIDENT_EXPERT_PROVIDER_H_
#define EXPERTD_ENGINE_MODEL_RESIDENT_EXPERT_PROVIDER_H_

#include <memory>
#include <vector>

#include "engine/model/expert_provider.h"
#include "engine/model/resident_weights.h"

namespace expertd::engine {

class ResidentExpertProvider final : public ExpertProvider {
 public:
  // Errors: a missing / mis-shaped expert tensor, device memory exhausted.
  static absl::StatusOr<std::unique_ptr<ExpertProvider>> Create(
      const ExpertProviderContext& context);

  void OnRouting(int layer, absl::Span<const int32_t> experts) override {
    (void)layer;
    (void)experts;
  }
  absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) override;
  void Release(int layer, int expert) override {
    (void)layer;
    (void)expert;
  }
  bool HoldsAllExperts() const override { return true; }

 private:
  ResidentExpertProvider(Backend* backend, const WeightSource* source) : store_(backend, source) {}

  ResidentWeights store_;
  int64_t num_experts_ = 0;
  std::vector<ExpertWeights> experts_;  // [layer * num_experts + expert]; empty for dense layers
};

// The default factory (EngineOptions::expert_provider_factory when null).
ExpertProviderFactory ResidentExpertProviderFactory();

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_RESIDENT_EXPERT_PROVIDER_H_
