// SkewedWeightSource: a WeightSource view that makes routing skewed, for
// benchmarks on random models (which route almost uniformly, while real
// models have hot experts).
//
// The router rows of each MoE layer are rescaled by a Zipf law over a random
// per-layer popularity order: the expert of popularity rank r (0 = hottest)
// gets its row multiplied by (r + 1)^(-skew / 2) (the hottest row keeps its
// norm). Router logits of random models are roughly
// zero-mean, so a larger row norm means a larger logit spread, and top-k
// (k < E/2) then picks that expert more often: skew 0 is the model itself,
// skew 1 makes the hottest quarter of the experts take most demands (the
// benchmark prints the share). Every other tensor passes through unchanged,
// so the experts (and the expert pack) are the model's own.
//
// Thread safety: as WeightSource (the rescaled routers are built up front).
#ifndef EXPERTD_ENGINE_EXPERTS_BENCH_SKEWED_WEIGHT_SOURCE_H_
#define EXPERTD_ENGINE_EXPERTS_BENCH_SKEWED_WEIGHT_SOURCE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/weight_source.h"

namespace expertd::engine {

class SkewedWeightSource final : public WeightSource {
 public:
  // REQUIRES: skew >= 0. Routers are returned as fp32.
  SkewedWeightSource(std::shared_ptr<const WeightSource> base, double skew, uint32_t seed);

  const models::ModelConfig& config() const override { return base_->config(); }
  bool Has(const std::string& name) const override { return base_->Has(name); }
  absl::StatusOr<models::TensorView> Get(const std::string& name) const override;

 private:
  std::shared_ptr<const WeightSource> base_;
  std::map<std::string, std::vector<float>> routers_;  // name -> [E, H] fp32
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_BENCH_SKEWED_WEIGHT_SOURCE_H_
