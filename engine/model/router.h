// Router: picks each token's experts in an MoE layer. A seam: the softmax
// top-k router serves Mixtral / Qwen2-MoE / Qwen3-MoE / OLMoE; DeepSeek-V3's
// sigmoid grouped top-k (noaux_tc) is the second implementation.
#ifndef EXPERTD_ENGINE_MODEL_ROUTER_H_
#define EXPERTD_ENGINE_MODEL_ROUTER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/model/layer_context.h"
#include "engine/model/resident_weights.h"
#include "models/config/model_config.h"

namespace expertd::engine {

class Router {
 public:
  virtual ~Router() = default;
  virtual int64_t top_k() const = 0;
  // The gate weight [num_experts, hidden] (for speculative prefetch).
  virtual WeightRef gate_weight() const = 0;
  // x: [rows, hidden] (device) -> ids / weights [rows, top_k] (device): the
  // experts in router rank order and the weights their outputs are scaled by.
  // Errors are device faults (a router that selects on the host copies).
  virtual absl::Status Route(const LayerContext& ctx, const float* x, int32_t* ids,
                             float* weights) = 0;
};

// logits = x Wg^T; softmax; top-k; renormalise when config.norm_topk_prob.
absl::StatusOr<std::unique_ptr<Router>> CreateSoftmaxTopKRouter(ResidentWeights* store,
                                                                const models::ModelConfig& config,
                                                                int layer);

// DeepSeek-V3 (sigmoid scores, e_score_correction_bias, grouped top-k,
// routed_scaling_factor): grouped_topk.h has the formula.
absl::StatusOr<std::unique_ptr<Router>> CreateGroupedSigmoidRouter(
    ResidentWeights* store, const models::ModelConfig& config, int layer);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_ROUTER_H_
