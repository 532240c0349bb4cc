// FeedForward: the second half of a decoder layer. A dense SwiGLU MLP, or a
// sparse MoE block (router + routed experts through the ExpertProvider +
// optional gated shared expert).
#ifndef EXPERTD_ENGINE_MODEL_FEED_FORWARD_H_
#define EXPERTD_ENGINE_MODEL_FEED_FORWARD_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/layer_context.h"
#include "engine/model/resident_weights.h"
#include "engine/model/router.h"

namespace expertd::engine {

// One MoE layer's routing for every row of a step (host copies).
struct RowRouting {
  int64_t top_k = 0;           // 0 for a dense layer
  std::vector<int32_t> ids;    // [rows, top_k]
  std::vector<float> weights;  // [rows, top_k]
};

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // x: [rows, hidden] normalised input (device). Adds the block's output into
  // residual [rows, hidden]. When `routing` is non-null an MoE block fills it.
  virtual absl::Status Forward(const LayerContext& ctx, const float* x, float* residual,
                               RowRouting* routing) = 0;
  // The router of an MoE block, null for a dense MLP.
  virtual Router* router() { return nullptr; }
};

// A SwiGLU MLP's weights: y = down(silu(gate x) * up x).
struct MlpWeights {
  WeightRef gate, up, down;
};

// Computes an MLP on `rows` rows of x into y [rows, hidden] (y = or +=).
void RunMlp(Backend* be, Workspace* ws, const MlpWeights& w, const float* x, int64_t rows, float* y,
            bool accumulate);

// A dense layer (mlp_only_layers): gate/up [intermediate, H], down [H, intermediate].
absl::StatusOr<std::unique_ptr<FeedForward>> CreateDenseMlp(ResidentWeights* store,
                                                            const models::ModelConfig& config,
                                                            int layer);

// A sparse MoE block with `router`.
absl::StatusOr<std::unique_ptr<FeedForward>> CreateMoeBlock(ResidentWeights* store,
                                                            const models::ModelConfig& config,
                                                            int layer,
                                                            std::unique_ptr<Router> router);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_FEED_FORWARD_H_
