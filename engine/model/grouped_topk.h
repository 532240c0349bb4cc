// DeepSeek-V3's router selection (MoEGate, topk_method "noaux_tc"), on the
// host, per row of router logits, as the reference computes it in fp32:
//   s = sigmoid(logits);  c = s + e_score_correction_bias   (c only selects)
//   group score = sum of the two largest c in each of n_group equal groups
//   keep the topk_group best groups; c of the other experts := 0.0
//   ids = the top_k largest c (ties to the lower id), emitted ascending
//   w = s[ids];  if top_k > 1 and norm_topk_prob: w /= (sum(w) + 1e-20)
//   w *= routed_scaling_factor
// (The reference's top-k is unordered; ascending ids is the order its combine
// is insensitive to and the order the fixtures store.)
#ifndef EXPERTD_ENGINE_MODEL_GROUPED_TOPK_H_
#define EXPERTD_ENGINE_MODEL_GROUPED_TOPK_H_

#include <cstdint>

namespace expertd::engine {

struct GroupedTopKConfig {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t n_group = 1;     // divides num_experts; each group >= 2 experts
  int64_t topk_group = 1;  // <= n_group; topk_group * group size >= top_k
  bool normalize = false;
  float routed_scaling_factor = 1.0f;
};

// logits [rows, num_experts], bias [num_experts] -> ids, weights [rows, top_k].
void GroupedSigmoidTopK(const GroupedTopKConfig& config, const float* logits, const float* bias,
                        int64_t rows, int32_t* ids, float* weights);

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_GROUPED_TOPK_H_
