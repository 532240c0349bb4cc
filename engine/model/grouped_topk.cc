#include "engine/model/grouped_topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace expertd::engine {
namespace {

// Indices of the k largest values, larger first, ties to the lower index.
std::vector<int32_t> TopIndices(const std::vector<float>& v, int64_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

}  // namespace

void GroupedSigmoidTopK(const GroupedTopKConfig& g, const float* logits, const float* bias,
                        int64_t rows, int32_t* ids, float* weights) {
  const int64_t e = g.num_experts, per_group = e / g.n_group;
  std::vector<float> score(e), choice(e), group_score(g.n_group);
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * e;
    for (int64_t i = 0; i < e; ++i) {
      score[i] = 1.0f / (1.0f + std::exp(-l[i]));
      choice[i] = score[i] + bias[i];
    }
    for (int64_t grp = 0; grp < g.n_group; ++grp) {
      std::vector<float> members(choice.begin() + grp * per_group,
                                 choice.begin() + (grp + 1) * per_group);
      const std::vector<int32_t> best = TopIndices(members, 2);
      group_score[grp] = members[best[0]] + members[best[1]];
    }
    std::vector<bool> kept(g.n_group, false);
    for (int32_t grp : TopIndices(group_score, g.topk_group)) kept[grp] = true;
    for (int64_t i = 0; i < e; ++i) {
      if (!kept[i / per_group]) choice[i] = 0.0f;  // masked_fill(~mask, 0.0), not -inf
    }
    std::vector<int32_t> top = TopIndices(choice, g.top_k);
    std::sort(top.begin(), top.end());
    int32_t* row_ids = ids + r * g.top_k;
    float* row_w = weights + r * g.top_k;
    float sum = 0.0f;
    for (int64_t j = 0; j < g.top_k; ++j) {
      row_ids[j] = top[j];
      row_w[j] = score[top[j]];
      sum += row_w[j];
    }
    const float denominator = sum + 1e-20f;
    for (int64_t j = 0; j < g.top_k; ++j) {
      if (g.top_k > 1 && g.normalize) row_w[j] = row_w[j] / denominator;
      row_w[j] = row_w[j] * g.routed_scaling_factor;
    }
  }
}

}  // namespace expertd::engine
