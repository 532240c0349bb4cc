// ProviderExerciser: plays the forward pass's side of the ExpertProvider contract
// against any provider, without a model: per step, per layer, the same call
// sequence engine/model makes (BeginStep, OnRouterInput, OnTokenRouting,
// OnRouting, OrderForCompute, Acquire/Release per expert, EndStep), with
// routing either random (optionally Zipf-skewed) or computed by each layer's
// router on the step's hidden state (then speculative prefetch guesses
// right). Every Acquire is checked byte for byte against the WeightSource.
// Used by tests and by the offload benchmark's trace mode. REQUIRES a backend
// whose device memory is host memory (the CPU backend): hidden states and
// router outputs are host vectors.
#ifndef EXPERTD_ENGINE_EXPERTS_TESTING_PROVIDER_EXERCISER_H_
#define EXPERTD_ENGINE_EXPERTS_TESTING_PROVIDER_EXERCISER_H_

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/model/expert_provider.h"
#include "engine/model/weight_source.h"

namespace expertd::engine {

struct ExerciseOptions {
  int64_t steps = 10;
  int64_t rows = 1;              // tokens per step
  bool route_by_router = false;  // else random choices
  double zipf_s = 0;             // skew of random choices (0 = uniform)
  bool verify_bytes = true;
  uint32_t seed = 1;
  // Called after every layer and every step (e.g. ExpertStore::
  // CheckInvariants); an error ends the run with it.
  std::function<absl::Status()> check;
};

class ProviderExerciser {
 public:
  // `weights` must carry routers (MakeTestModel does); `backend` computes
  // router-driven routing. Both outlive the driver.
  ProviderExerciser(Backend* backend, const WeightSource* weights)
      : backend_(backend), weights_(weights) {}

  // Runs `options.steps` steps against `provider`. Errors: the provider's,
  // or DataLoss naming the expert whose bytes differ from the source.
  absl::Status Run(ExpertProvider* provider, const ExerciseOptions& options);

  int64_t acquires() const { return acquires_; }

 private:
  absl::Status Layer(ExpertProvider* p, int layer, const float* hidden, const ExerciseOptions& o,
                     std::mt19937* rng);
  std::vector<int32_t> RouteRandom(int64_t rows, const ExerciseOptions& o, std::mt19937* rng) const;
  absl::StatusOr<std::vector<int32_t>> RouteByRouter(int layer, const float* hidden, int64_t rows);
  absl::Status Verify(int layer, int expert, const ExpertWeights& w) const;
  RouterInput InputFor(int layer, const float* hidden, int64_t rows) const;

  Backend* backend_;
  const WeightSource* weights_;
  int64_t acquires_ = 0;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_TESTING_PROVIDER_EXERCISER_H_
