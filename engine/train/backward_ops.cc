#include "engine/train/backward_ops.h"

#include <cstring>
#include <vector>

#include "engine/train/moe_block.h"

namespace expertd::train {

void CpuBackwardOps::RmsNormBackward(const float* x, const float* w, const float* rstd,
                                     const float* dy, float* dx, float* dw, int64_t n, int64_t d) {
  train::RmsNormBackward(x, w, rstd, dy, dx, dw, n, d, pool_);
}

void CpuBackwardOps::SwiGluBackward(const float* gate, const float* up, const float* dact,
                                    float* dgate, float* dup, int64_t count) {
  train::SwiGluBackward(gate, up, dact, dgate, dup, count);
}

void CpuBackwardOps::RopeBackward(const float* cos, const float* sin, int64_t half, float* dx,
                                  int64_t batch, int64_t t, int64_t heads) {
  train::RopeBackward(cos, sin, half, dx, batch, t, heads);
}

void CpuBackwardOps::EmbeddingBackward(const int32_t* ids, const float* dy, int64_t n, int64_t d,
                                       int32_t padding_idx, float* dtable) {
  train::EmbeddingBackward(ids, dy, n, d, padding_idx, dtable);
}

void CpuBackwardOps::CrossEntropy(const float* logits, const int32_t* targets, int64_t n, int64_t v,
                                  float scale, float* dlogits, double* row_loss) {
  CrossEntropyRows(logits, targets, n, v, scale, dlogits, row_loss, pool_);
}

void CpuBackwardOps::RouterBackward(const float* probs, const int32_t* topk_ids,
                                    const float* topk_weight, const float* dweight,
                                    const float* aux_dprob, int64_t n, int64_t num_experts,
                                    int64_t top_k, bool normalize, float* dlogits) {
  // As MoeRouterAndSharedBackward composes them for a softmax router.
  std::vector<float> dprobs(n * num_experts, 0.0f);
  RouteTopKBackward(probs, topk_ids, topk_weight, dweight, n, num_experts, top_k, normalize,
                    dprobs.data());
  if (aux_dprob != nullptr) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t e = 0; e < num_experts; ++e) dprobs[r * num_experts + e] += aux_dprob[e];
    }
  }
  SoftmaxBackward(probs, dprobs.data(), dlogits, n, num_experts);
}

void CpuBackwardOps::GroupedSigmoidRouterBackward(const float* scores, const int32_t* topk_ids,
                                                  const float* dweight, int64_t n,
                                                  int64_t num_experts, int64_t top_k,
                                                  bool norm_topk_prob, float routed_scaling_factor,
                                                  float* dlogits) {
  Parameter router;  // only its shape is read
  router.shape = {num_experts, 1};
  FeedForwardParams p;
  p.router = &router;
  p.top_k = top_k;
  p.norm_topk_prob = norm_topk_prob;
  p.routed_scaling_factor = routed_scaling_factor;
  RouteGroupedSigmoidBackward(p, scores, topk_ids, dweight, n, dlogits);
}

void CpuBackwardOps::AttentionBackward(const AttentionShape& s, const float* q, const float* k,
                                       const float* v, const float* probs, const float* dout,
                                       float* dq, float* dk, float* dv, float* /*dscores*/) {
  train::AttentionBackward(s, q, k, v, probs, dout, dq, dk, dv, pool_);
}

void CpuBackwardOps::AdamWUpdate(const AdamWConstants& c, const float* g, float* p, float* m,
                                 float* v, int64_t n, models::DType weight_dtype, void* weight) {
  AdamWUpdateScalar(c, g, p, m, v, n);
  if (weight == nullptr) return;
  if (weight_dtype == models::DType::kF32) {
    std::memcpy(weight, p, n * sizeof(float));
  } else {
    models::ConvertFromF32(weight_dtype, p, weight, n);
  }
}

}  // namespace expertd::train
