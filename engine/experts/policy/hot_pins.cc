#include "engine/experts/policy/hot_pins.h"

#include <algorithm>
#include <cmath>

namespace expertd::engine {

std::vector<ExpertKey> HottestPerLayer(const DecayedCounter& counts,
                                       const std::vector<int32_t>& layers, int32_t num_experts,
                                       double fraction, size_t max_total) {
  const size_t per_layer = static_cast<size_t>(std::lround(std::max(0.0, fraction) * num_experts));
  std::vector<std::vector<ExpertKey>> ranked(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    std::vector<ExpertKey>& r = ranked[i];
    for (int32_t e = 0; e < num_experts; ++e) {
      ExpertKey k{layers[i], e};
      if (counts.Score(k) > 0) r.push_back(k);
    }
    std::stable_sort(r.begin(), r.end(), [&](const ExpertKey& a, const ExpertKey& b) {
      return counts.Score(a) > counts.Score(b);
    });
    if (r.size() > per_layer) r.resize(per_layer);
  }
  std::vector<ExpertKey> out;
  for (size_t rank = 0; rank < per_layer; ++rank) {
    for (const auto& r : ranked) {
      if (out.size() >= max_total) return out;
      if (rank < r.size()) out.push_back(r[rank]);
    }
  }
  return out;
}

}  // namespace expertd::engine
