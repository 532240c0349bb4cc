// FeedForward: the second half of a decoder layer. A dense SwiGLU MLP, or a
// sparse MoE block (router + routed experts through the ExpertProvider +
// optional gated shared expert).
#ifndef EXPERTD_ENGINE_MODEL_FEED_FORWARD_H_
#define EXPERTD_ENGINE_MODEL_FEED_FORWARD_H_

#include <cassert>
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

// A SwiGLU MLP's weights: y = down(silu(gate x) * up x). gpt-oss' experts
// add a bias to each projection and clamp their SwiGLU (SwiGluParams::limit).
struct MlpWeights {
  WeightRef gate, up, down;
  WeightRef gate_bias, up_bias, down_bias;  // empty: none
  float swiglu_limit = 0.0f, swiglu_alpha = 1.0f;
  bool has_bias() const { return !gate_bias.empty() || !up_bias.empty() || !down_bias.empty(); }
};

// Computes an MLP on `rows` rows of x into y [rows, hidden] (y = or +=).
void RunMlp(Backend* be, Workspace* ws, const MlpWeights& w, const float* x, int64_t rows, float* y,
            bool accumulate);

// One routed expert's rows, where they lie (device memory): entry r reads
// row in_rows[r] of the layer's input and its output goes to row
// out_rows[r] of y: written (=) when `weights` is null, else weighted by
// weights[weight_index[r]] and added (+=), as MoeScatterAdd adds.
struct RoutedRows {
  const int32_t* in_rows = nullptr;
  const int32_t* out_rows = nullptr;  // distinct
  const float* weights = nullptr;
  const int32_t* weight_index = nullptr;
};

// An expert's MLP over `rows` routed rows of x [*, hidden] into rows of
// y [*, hidden], without gathering the rows or writing the outputs apart
// (MatmulParams' row maps; REQUIRES be->HasMatmulRowMaps()). Bitwise
// GatherRows, RunMlp, then ScatterRows (no weights) or MoeScatterAdd.
void RunRoutedMlp(Backend* be, Workspace* ws, const MlpWeights& w, const float* x,
                  const RoutedRows& routed, int64_t rows, float* y);

// Several experts' MLPs over their grouped rows: rows [row_offset[g],
// row_offset[g + 1]) of x run expert g's weights (all experts the same
// widths). Three Backend::GroupedMatmul calls and one SwiGlu over every row,
// so each row's result is bitwise what RunMlp gives it. x: [rows, H]
// contiguous; gate, up: [rows, I] scratch; y: [rows, H] (= or +=).
// With row maps (REQUIRES be->HasMatmulRowMaps()), grouped row r reads row
// x_rows[r] of x [*, H] and its result goes to row y_rows[r] of y [*, H].
// `row_offset` is host memory, [experts.size() + 1].
struct GroupedMlp {
  std::vector<WeightRef> gate, up, down;  // [experts], host
  std::vector<int64_t> row_offset;        // [experts + 1], row_offset[0] == 0
  // REQUIRES: !w.has_bias() and a plain SwiGLU (the grouped path has neither).
  void Add(const MlpWeights& w, int64_t rows) {
    assert(!w.has_bias() && w.swiglu_limit == 0.0f);
    if (row_offset.empty()) row_offset.push_back(0);
    gate.push_back(w.gate);
    up.push_back(w.up);
    down.push_back(w.down);
    row_offset.push_back(row_offset.back() + rows);
  }
  int64_t rows() const { return row_offset.empty() ? 0 : row_offset.back(); }
};
void RunGroupedMlp(Backend* be, const GroupedMlp& experts, const float* x, float* gate, float* up,
                   float* y, bool accumulate, const int32_t* x_rows = nullptr,
                   const int32_t* y_rows = nullptr);

// Routed experts on their dispatched rows with the grouped GEMM: entry j of
// gather_index / slot_index (device, int32) names the row of x [*, H] to
// run and the row of slots [*, H] its output goes to; experts[i] owns the
// next rows[i] entries, from entry 0 on. Runs in batches of at most
// kGroupedBatchRows entries (an expert may straddle two: rows are
// independent), gathering each batch once, three GroupedMatmul, one
// SwiGlu, one scatter; where the backend's matmuls take row maps the GEMMs
// read the rows and write the slots in place instead. Bitwise what one
// gather / RunMlp / scatter per expert gives. Errors: the workspace's grouped buffers cannot grow.
inline constexpr int64_t kGroupedBatchRows = 2048;
absl::Status RunGroupedExperts(Backend* be, Workspace* ws, const float* x,
                               const int32_t* gather_index, const int32_t* slot_index, float* slots,
                               const std::vector<MlpWeights>& experts,
                               const std::vector<int64_t>& rows);

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
