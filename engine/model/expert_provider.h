// ExpertProvider: how the forward pass gets routed-expert weights.
//
// This header is the contract between the forward pass and expert offloading
// (engine/experts/). The forward pass (engine/model) only ever touches a routed
// expert's weights through this interface; ResidentExpertProvider
// (resident_expert_provider.h) keeps every expert in device memory, and the
// tiered ExpertStore (device cache <- pinned host <- SSD, prefetch)
// implements the same interface. Change it only with both sides in view.
//
// The call sequence for one Engine::Step (all calls on the engine thread):
//
//   BeginStep(num_tokens)
//   for each decoder layer L in order:
//     [attention]
//     OnRouterInput({L, normed hidden states, next MoE layer's router})
//     if L is an MoE layer:
//       OnTokenRouting(L, ids, top_k)  // per-token choices (routing traces)
//       OnRouting(L, experts)          // distinct experts this step, ascending
//       OrderForCompute(L, &order)     // provider may reorder (hits first)
//       for e in order: Acquire(L, e) -> compute e's tokens -> Release(L, e)
//   EndStep()
//
// Every Acquire is matched by exactly one Release, also when a later step
// fails (then EndStep is still called). The engine never holds more than one
// expert acquired at a time per layer, so a provider whose cache cannot hold
// all of a layer's experts can load them in waves; only a provider whose
// HoldsAllExperts() is true may see every expert of the layer acquired
// before the first Release (the grouped expert GEMM, expert_gemm.h).
//
// Determinism: the engine's result does not depend on the order experts are
// computed in (expert outputs go to per-(token, rank) slots and are combined
// in a fixed order per token), so OrderForCompute and the cache state can
// never change results: an offloaded run is bitwise identical to a resident
// one on the same backend.
#ifndef EXPERTD_ENGINE_MODEL_EXPERT_PROVIDER_H_
#define EXPERTD_ENGINE_MODEL_EXPERT_PROVIDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/model/routed_experts.h"
#include "engine/model/weight_source.h"
#include "models/config/model_config.h"

namespace expertd::engine {

// One routed expert's SwiGLU weights in DEVICE memory (HF layout):
//   y = down( silu(gate x) * (up x) )
struct ExpertWeights {
  WeightRef gate;  // [moe_intermediate_size, hidden_size]  (Mixtral w1)
  WeightRef up;    // [moe_intermediate_size, hidden_size]  (Mixtral w3)
  WeightRef down;  // [hidden_size, moe_intermediate_size]  (Mixtral w2)
};

// What an expert's MLP has beyond its matrices (gpt-oss): a bias on each
// projection and the clamped SwiGLU (SwiGluParams::limit / alpha). The
// biases are the MoE block's resident weights: host memory when the
// backend's memory is the host's.
struct ExpertExtras {
  WeightRef gate_bias, up_bias, down_bias;  // empty: none
  float swiglu_limit = 0.0f, swiglu_alpha = 1.0f;
};

// What a prefetcher may look at after layer `layer`'s attention: the
// post-attention RMS-normalised hidden states, i.e. exactly the input of
// layer `layer`'s router / MLP. For speculative prefetch ("apply layer N+1's
// router to layer N's hidden state") the next MoE layer's router weight is
// included; the provider may run a Matmul on `backend` with it.
struct RouterInput {
  int layer = 0;
  const float* hidden = nullptr;  // [rows, hidden_size], device memory;
                                  // valid only during the call (copy it if needed later)
  int64_t rows = 0;               // tokens in this step
  int64_t hidden_size = 0;
  int next_moe_layer = -1;  // -1 when no MoE layer follows
  WeightRef next_router;    // [num_experts, hidden_size]; empty if none
};

// Everything a provider may need at creation. Pointers outlive the provider.
struct ExpertProviderContext {
  Backend* backend = nullptr;
  const models::ModelConfig* config = nullptr;
  // Host-side access to every tensor (the experts' HF tensors included), e.g.
  // to build an expert-packed file. Names: see ExpertTensorNames().
  const WeightSource* weights = nullptr;
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;

  virtual void BeginStep(int64_t num_tokens) { (void)num_tokens; }

  // Hook for speculative prefetch; called for every decoder layer (dense ones
  // too). Must not block for long: start asynchronous work and return.
  virtual void OnRouterInput(const RouterInput& input) { (void)input; }

  // The per-token choices behind the next OnRouting call:
  // `ids` is [rows, top_k] row-major, each row in the router's rank order
  // (host memory, valid only during the call). The expert store records them
  // in routing traces (--routing_trace); please call it right before
  // OnRouting with the same routing the engine computes.
  virtual void OnTokenRouting(int layer, absl::Span<const int32_t> ids, int top_k) {
    (void)layer;
    (void)ids;
    (void)top_k;
  }

  // The distinct experts (ascending ids) that layer's router chose for this
  // step's tokens, before any Acquire of that layer: start loading misses.
  virtual void OnRouting(int layer, absl::Span<const int32_t> experts) = 0;

  // May permute *experts (same set) to choose the compute order, e.g.
  // resident experts first. Default: ascending ids.
  virtual void OrderForCompute(int layer, std::vector<int32_t>* experts) {
    (void)layer;
    (void)experts;
  }

  // Returns the expert's weights in device memory, blocking until they are
  // there. They stay valid (pinned, not evictable) until Release(layer,
  // expert). An error (I/O, corrupt pack) fails the step.
  virtual absl::StatusOr<ExpertWeights> Acquire(int layer, int expert) = 0;
  virtual void Release(int layer, int expert) = 0;

  // True when every expert of a layer may be acquired at once (all resident:
  // acquiring costs nothing and evicts nothing). Default: false.
  virtual bool HoldsAllExperts() const { return false; }

  virtual void EndStep() {}

  // ---- Missed experts computed on the host (optional; --expert_compute) ------
  // A provider may compute some of a step's experts itself, on the host from
  // its host copy, instead of bringing them to the device; only activations
  // cross. Per MoE layer, before OnRouting, the engine offers the layer's
  // distinct experts (ascending) with the rows routed to each:
  //
  //   host = PlanHostCompute(L, experts, tokens)   // ascending subset
  //   OnRouting(L, experts - host) ... Acquire/Release as above, device only
  //   StartHostCompute(L, e, x_e, n_e, y_e, extras_e) for e in host (before
  //                                          the device experts: both overlap)
  //   FinishHostCompute(L)                   // waits for them all
  //
  // x_e [n_e, hidden] and y_e [n_e, hidden] are host memory, valid until
  // FinishHostCompute returns; it returns the first job's error. The engine
  // calls FinishHostCompute exactly once after every PlanHostCompute, also
  // when the layer fails midway. y_e lands in the expert's (token, rank)
  // slots like a device expert's output, so results do not depend on where
  // an expert ran (beyond the kernels' own summation order).
  virtual std::vector<int32_t> PlanHostCompute(int layer, absl::Span<const int32_t> experts,
                                               absl::Span<const int64_t> tokens) {
    (void)layer;
    (void)experts;
    (void)tokens;
    return {};
  }
  virtual void StartHostCompute(int layer, int expert, const float* x, int64_t rows, float* y,
                                const ExpertExtras& extras) {
    (void)layer;
    (void)expert;
    (void)x;
    (void)rows;
    (void)y;
    (void)extras;
  }
  virtual absl::Status FinishHostCompute(int layer) {
    (void)layer;
    return absl::OkStatus();
  }

  // A provider that computes the routed experts itself (a multi-device
  // strategy, engine/parallel) returns its executor; the MoE block then calls
  // RoutedExperts::Run instead of OnRouting/Acquire/Release. Default: none.
  virtual RoutedExperts* routed_experts() { return nullptr; }
};

using ExpertProviderFactory =
    std::function<absl::StatusOr<std::unique_ptr<ExpertProvider>>(const ExpertProviderContext&)>;

// HF tensor names of one routed expert in `config`'s architecture.
struct ExpertTensorNames {
  std::string gate, up, down;
};
ExpertTensorNames ExpertTensorNamesFor(const models::ModelConfig& config, int layer, int expert);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_EXPERT_PROVIDER_H_
