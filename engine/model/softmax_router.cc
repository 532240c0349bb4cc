#include "base/status_macros.h"
#include "engine/model/router.h"
#include "models/checkpoint/tensor_names.h"

namespace expertd::engine {
namespace {

class SoftmaxTopKRouter final : public Router {
 public:
  SoftmaxTopKRouter(WeightRef gate, WeightRef bias, int64_t top_k, bool renormalize)
      : gate_(gate), bias_(bias), top_k_(top_k), renormalize_(renormalize) {}

  int64_t top_k() const override { return top_k_; }
  WeightRef gate_weight() const override { return gate_; }

  absl::Status Route(const LayerContext& ctx, const float* x, int32_t* ids,
                     float* weights) override {
    const int64_t rows = ctx.batch->rows;
    float* logits = ctx.ws->f(Buf::kRouterLogits);
    MatmulParams m;
    m.x = x;
    m.x_stride = gate_.cols;
    m.w = gate_;
    m.bias = bias_;
    m.y = logits;
    m.y_stride = gate_.rows;
    m.m = rows;
    ctx.backend->Matmul(m);
    SoftmaxTopKParams s;
    s.logits = logits;
    s.rows = rows;
    s.num_experts = gate_.rows;
    s.top_k = top_k_;
    s.renormalize = renormalize_;
    s.ids = ids;
    s.weights = weights;
    ctx.backend->SoftmaxTopK(s);
    return absl::OkStatus();
  }

 private:
  const WeightRef gate_;
  const WeightRef bias_;  // gpt-oss; empty otherwise
  const int64_t top_k_;
  const bool renormalize_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> CreateSoftmaxTopKRouter(ResidentWeights* store,
                                                                const models::ModelConfig& c,
                                                                int layer) {
  ASSIGN_OR_RETURN(WeightRef gate,
                   store->Load(models::RouterName(c, layer), c.num_experts, c.hidden_size));
  WeightRef bias;
  if (c.router_bias) {
    ASSIGN_OR_RETURN(bias, store->Load(models::RouterLinearBiasName(layer), 1, c.num_experts));
  }
  // gpt-oss takes the softmax of the top-k logits: the renormalised top-k of
  // the softmax over all of them.
  return std::unique_ptr<Router>(
      new SoftmaxTopKRouter(gate, bias, c.num_experts_per_tok, c.norm_topk_prob));
}

}  // namespace expertd::engine
