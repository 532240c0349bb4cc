// Softmax router top-k (Mixtral, Qwen2/3-MoE, OLMoE), per row:
//   p = softmax(logits) in fp32 (max-subtracted, sum in expert order);
//   top-k by descending p, ties to the lower expert id (torch.topk);
//   optional renormalisation w /= sum(w) (sum in rank order).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/backend/cpu/kernels.h"

namespace expertd::engine::cpu {

void SoftmaxTopK(const SoftmaxTopKParams& p, ThreadPool* pool) {
  assert(p.top_k >= 1 && p.top_k <= p.num_experts);
  ParallelFor(pool, p.rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> prob(p.num_experts);
    std::vector<int32_t> order(p.num_experts);
    for (int64_t r = begin; r < end; ++r) {
      const float* logits = p.logits + r * p.num_experts;
      float mx = logits[0];
      for (int64_t e = 1; e < p.num_experts; ++e) mx = std::max(mx, logits[e]);
      float sum = 0.0f;
      for (int64_t e = 0; e < p.num_experts; ++e) {
        prob[e] = std::exp(logits[e] - mx);
        sum += prob[e];
      }
      for (int64_t e = 0; e < p.num_experts; ++e) prob[e] = prob[e] / sum;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(
          order.begin(), order.begin() + p.top_k, order.end(),
          [&](int32_t a, int32_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
      int32_t* ids = p.ids + r * p.top_k;
      float* w = p.weights + r * p.top_k;
      float wsum = 0.0f;
      for (int64_t j = 0; j < p.top_k; ++j) {
        ids[j] = order[j];
        w[j] = prob[order[j]];
        wsum += w[j];
      }
      if (p.renormalize) {
        for (int64_t j = 0; j < p.top_k; ++j) w[j] = w[j] / wsum;
      }
    }
  });
}

}  // namespace expertd::engine::cpu
