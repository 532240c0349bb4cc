// PregateOverlay: a WeightSource view that adds pre-gate tensors to a model
// that has none (synthetic benchmark models): layer L's pre-gate
// (models::PregateName) is the router of the next MoE layer, so
// --prefetch=pregate runs its real code path with the prediction quality of
// --prefetch=speculative. Trained pre-gates (the fine-tune issue) would
// predict better; the benchmark table says which this is.
#ifndef EXPERTD_ENGINE_BACKEND_CUDA_BENCH_PREGATE_OVERLAY_H_
#define EXPERTD_ENGINE_BACKEND_CUDA_BENCH_PREGATE_OVERLAY_H_

#include <map>
#include <memory>
#include <string>

#include "engine/model/weight_source.h"

namespace expertd::engine::cuda_bench {

class PregateOverlay final : public WeightSource {
 public:
  explicit PregateOverlay(std::shared_ptr<const WeightSource> base);
  const models::ModelConfig& config() const override { return base_->config(); }
  bool Has(const std::string& name) const override {
    return aliases_.count(name) > 0 || base_->Has(name);
  }
  absl::StatusOr<models::TensorView> Get(const std::string& name) const override;

 private:
  std::shared_ptr<const WeightSource> base_;
  std::map<std::string, std::string> aliases_;  // pre-gate name -> next router's name
};

}  // namespace expertd::engine::cuda_bench

#endif  // EXPERTD_ENGINE_BACKEND_CUDA_BENCH_PREGATE_OVERLAY_H_
