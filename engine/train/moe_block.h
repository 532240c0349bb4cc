// The feed-forward half of a decoder layer for training: a dense SwiGLU MLP
// or a MoE block (softmax router, top-k, optional renormalisation, routed
// SwiGLU experts, optional shared expert with a sigmoid gate), forward with
// saved activations and backward. Dropless: every routed token is computed.
//
// FeedForwardExecutor is the seam where a schedule runs one layer's block:
// the step loop never calls the math directly, so memory-saving schedules
// (expert offload between forward and backward, chunked tokens,
// micro-batched experts) replace the executor without touching the loop.
#ifndef EXPERTD_ENGINE_TRAIN_MOE_BLOCK_H_
#define EXPERTD_ENGINE_TRAIN_MOE_BLOCK_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/train/device_memory.h"
#include "engine/train/parameter.h"

namespace expertd::train {

using engine::ThreadPool;

// gate/up (F,H), down (H,F).
struct MlpParams {
  Parameter* gate = nullptr;
  Parameter* up = nullptr;
  Parameter* down = nullptr;
  int64_t width() const { return gate->shape[0]; }
};

struct MlpActivations {
  int64_t rows = 0;
  std::vector<float> gate, up, act;  // (rows, F)
  std::vector<float> out;            // (rows, H)
};

// out = down(silu(gate(x)) * up(x)) over x (rows, H).
void MlpForward(const MlpParams& p, const float* x, int64_t rows, int64_t hidden, MlpActivations* a,
                ThreadPool* pool);
// dx (rows, H) += d/dx of sum(dout * out); parameter gradients accumulate.
void MlpBackward(const MlpParams& p, const float* x, const MlpActivations& a, const float* dout,
                 int64_t hidden, float* dx, ThreadPool* pool);

struct FeedForwardParams {
  bool moe = false;
  MlpParams dense;                   // !moe
  Parameter* router = nullptr;       // (E,H)
  std::vector<MlpParams> experts;    // E routed experts
  MlpParams shared;                  // shared.gate == nullptr: none
  Parameter* shared_gate = nullptr;  // (1,H) or null
  int64_t top_k = 0;
  bool norm_topk_prob = false;
};

struct FeedForwardActivations {
  MlpActivations dense;
  // MoE.
  std::vector<float> probs;                        // (N,E) router softmax
  std::vector<int32_t> topk_ids;                   // (N,K) in rank order
  std::vector<float> topk_weight;                  // (N,K) weights applied to the experts' outputs
  std::vector<std::vector<int32_t>> expert_rows;   // per expert: token rows, ascending
  std::vector<std::vector<int32_t>> expert_slots;  // per expert: the rank k of each row
  std::vector<std::vector<float>> expert_inputs;   // per expert: gathered rows (rows, H)
  std::vector<MlpActivations> expert_acts;
  MlpActivations shared;
  std::vector<float> shared_gate_sigmoid;  // (N)
  // Schedules: the number of row slices each expert ran in (1: the expert
  // activations above are saved; more: they are recomputed in backward), and
  // the device memory these activations hold, released as backward consumes
  // them (mutable: accounting, not values).
  int expert_slices = 1;
  mutable std::vector<DeviceReservation> held;
};

class FeedForwardExecutor {
 public:
  virtual ~FeedForwardExecutor() = default;
  // y (N,H) = block(x); writes y, saves what Backward needs in *a.
  // ResourceExhausted when the schedule's device memory does not hold it.
  virtual absl::Status Forward(const FeedForwardParams& p, const float* x, int64_t n,
                               int64_t hidden, FeedForwardActivations* a, float* y,
                               ThreadPool* pool) = 0;
  // dx (N,H) += d/dx of sum(dy * y) + the router's share of the auxiliary
  // loss, whose gradient w.r.t. every router probability of expert e is
  // aux_dprob[e] (empty: no auxiliary loss). Parameter gradients accumulate.
  virtual absl::Status Backward(const FeedForwardParams& p, const float* x,
                                const FeedForwardActivations& a, const float* dy,
                                const std::vector<float>& aux_dprob, int64_t n, int64_t hidden,
                                float* dx, ThreadPool* pool) = 0;
};

// Everything in memory, experts one after another in index order.
class InMemoryFeedForwardExecutor : public FeedForwardExecutor {
 public:
  absl::Status Forward(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
                       FeedForwardActivations* a, float* y, ThreadPool* pool) override;
  absl::Status Backward(const FeedForwardParams& p, const float* x,
                        const FeedForwardActivations& a, const float* dy,
                        const std::vector<float>& aux_dprob, int64_t n, int64_t hidden, float* dx,
                        ThreadPool* pool) override;
};

// The pieces of a MoE block that every schedule shares (the expert loop is
// what schedules change). MoeRoute: router logits, top-k, and each expert's
// rows and rank slots into *a. MoeSharedForward: y += the (gated) shared
// expert's output (no-op without one).
void MoeRoute(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
              FeedForwardActivations* a, ThreadPool* pool);
void MoeSharedForward(const FeedForwardParams& p, const float* x, int64_t n, int64_t hidden,
                      FeedForwardActivations* a, float* y, ThreadPool* pool);
// Expert e received no token: its parameters (and adapters) still get a zero
// gradient, as in Hugging Face.
void TouchUnusedExpertGrads(const FeedForwardParams& p, int64_t e);
// Router backward from dweight (N,K) (d loss / d topk_weight) and the
// auxiliary loss, then the shared expert's backward; dx accumulates.
void MoeRouterAndSharedBackward(const FeedForwardParams& p, const float* x,
                                const FeedForwardActivations& a, const float* dy,
                                const std::vector<float>& dweight,
                                const std::vector<float>& aux_dprob, int64_t n, int64_t hidden,
                                float* dx, ThreadPool* pool);

// Router forward on logits (N,E): probs = softmax, top-k by probability
// (ties to the lower index), weights = the top-k probabilities, divided by
// their sum when `normalize`.
void RouteTopK(const float* logits, int64_t n, int64_t num_experts, int64_t top_k, bool normalize,
               float* probs, int32_t* topk_ids, float* topk_weight);
// d(probs) (N,E) += from d(topk_weight) (N,K), through the renormalisation.
void RouteTopKBackward(const float* probs, const int32_t* topk_ids, const float* topk_weight,
                       const float* dweight, int64_t n, int64_t num_experts, int64_t top_k,
                       bool normalize, float* dprobs);

}  // namespace expertd::train

#endif  // EXPERTD_ENGINE_TRAIN_MOE_BLOCK_H_
