// Prefetchers: guess which experts the next MoE layer will choose, from what
// the engine shows after a layer's attention (RouterInput), so the store can
// start loading them while the current layer computes. A wrong guess costs
// bandwidth and cache space, never correctness: the store falls back to
// loading on demand.
//
//   all:          every expert of the next MoE layer (MoE-Prefetch).
//   speculative:  the next MoE layer's own router applied to this layer's
//                 normalised hidden state (residual streams change slowly, so
//                 it usually agrees with the real routing).
//   pregate:      a trained pre-gate stored in this layer,
//                 model.layers.N.mlp.pregate.weight (Mixtral:
//                 model.layers.N.block_sparse_moe.pregate.weight)
//                 [num_experts, hidden], predicting the next MoE layer's
//                 experts from layer N's router input (Pre-gated MoE). Layers
//                 without one fall back to the speculative guess.
//
// Predict runs on the engine thread and may run ops on the backend (a Matmul
// and SoftmaxTopK into the prefetcher's own scratch buffers), so it never
// touches the engine's buffers.
#ifndef EXPERTD_ENGINE_EXPERTS_PREFETCHER_H_
#define EXPERTD_ENGINE_EXPERTS_PREFETCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/experts/expert_store_options.h"
#include "engine/model/expert_provider.h"
#include "engine/model/weight_source.h"

namespace expertd::engine {

class Prefetcher {
 public:
  virtual ~Prefetcher() = default;
  virtual const char* name() const = 0;
  // Experts of input.next_moe_layer to load, most wanted first (distinct).
  // Empty when there is no next MoE layer or nothing to guess with.
  virtual absl::StatusOr<std::vector<int32_t>> Predict(const RouterInput& input) = 0;
};

// Creates the prefetcher of `kind`. For kPregate, loads every pre-gate tensor
// present in `weights` onto `backend` (InvalidArgument naming a tensor with
// the wrong shape; NotFound when the checkpoint has none at all, or, with
// `require_every_pregate`, naming the first layer that lacks one). Returns
// null for kNone.
absl::StatusOr<std::unique_ptr<Prefetcher>> CreatePrefetcher(PrefetchKind kind, Backend* backend,
                                                             const WeightSource& weights,
                                                             bool require_every_pregate = false);

// The config.json key a checkpoint with trained pre-gates carries.
inline constexpr char kPregateConfigKey[] = "expertd_pregate";

// True when DIR/config.json has "expertd_pregate": true. False when the key
// is absent or false, or there is no such file; InvalidArgument when the key
// is not a boolean.
absl::StatusOr<bool> ConfigDeclaresPregate(const std::string& model_dir);

// Turns per-token top-k choices [rows, top_k] into distinct experts, ordered
// by how many tokens chose each (then by best rank, then id).
std::vector<int32_t> RankByVotes(const std::vector<int32_t>& ids, int64_t top_k);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_PREFETCHER_H_
