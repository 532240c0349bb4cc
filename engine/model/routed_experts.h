// RoutedExperts: the seam through which a multi-device execution strategy
// (engine/parallel: MoEShard, expert parallelism) takes over the routed
// experts of an MoE block. The MoE block routes as usual, then, when its
// ExpertProvider offers a RoutedExperts (ExpertProvider::routed_experts()),
// hands it the step's rows and routing and receives the combined routed
// output; otherwise it runs the experts itself through Acquire/Release.
// The shared expert and the residual add stay in the block.
#ifndef EXPERTD_ENGINE_MODEL_ROUTED_EXPERTS_H_
#define EXPERTD_ENGINE_MODEL_ROUTED_EXPERTS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace expertd::engine {

struct LayerContext;

// One MoE layer's routed-expert work for one step. Device pointers are in the
// engine backend's memory and valid during the call.
struct RoutedExpertsInput {
  int layer = 0;
  int64_t rows = 0;
  int64_t top_k = 0;
  int64_t hidden = 0;
  const float* x = nullptr;            // [rows, hidden] normalised input (device)
  const float* weights = nullptr;      // [rows, top_k] routing weights (device)
  absl::Span<const int32_t> host_ids;  // [rows, top_k] chosen experts (host), router rank order
};

class RoutedExperts {
 public:
  virtual ~RoutedExperts() = default;
  // out[t, :] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t, :]) for every
  // row t; out is [rows, hidden] in the engine backend's device memory.
  // Engine thread only. An error fails the step; the next step may succeed.
  virtual absl::Status Run(const LayerContext& ctx, const RoutedExpertsInput& input,
                           float* out) = 0;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_ROUTED_EXPERTS_H_
