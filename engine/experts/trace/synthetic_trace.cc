#include "engine/experts/trace/synthetic_trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace expertd::engine {
namespace {

// Draws k distinct indices with probability proportional to weights
// (successive sampling without replacement).
std::vector<int32_t> DrawDistinct(const std::vector<double>& weights, int32_t k,
                                  std::mt19937_64* rng) {
  std::vector<double> w = weights;
  std::vector<int32_t> out;
  for (int32_t i = 0; i < k; ++i) {
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    double u = std::uniform_real_distribution<double>(0, total)(*rng);
    int32_t pick = static_cast<int32_t>(w.size()) - 1;
    for (size_t j = 0; j < w.size(); ++j) {
      if (w[j] <= 0) continue;
      if (u < w[j]) {
        pick = static_cast<int32_t>(j);
        break;
      }
      u -= w[j];
    }
    while (w[pick] <= 0) --pick;  // guards rounding at the end of the range
    out.push_back(pick);
    w[pick] = 0;
  }
  return out;
}

}  // namespace

RoutingTrace GenerateSyntheticTrace(const SyntheticTraceOptions& o) {
  RoutingTrace trace;
  trace.header = {o.num_layers, o.num_experts, o.top_k, o.expert_bytes, "synthetic"};
  std::mt19937_64 rng(o.seed);
  // Per layer: expert popularity weights (Zipf over a random permutation).
  std::vector<std::vector<double>> weights(o.num_layers, std::vector<double>(o.num_experts));
  for (auto& w : weights) {
    std::vector<int32_t> perm(o.num_experts);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int32_t r = 0; r < o.num_experts; ++r) w[perm[r]] = 1.0 / std::pow(r + 1.0, o.zipf_s);
  }
  // previous[layer][token] = that token's last choice.
  std::vector<std::vector<std::vector<int32_t>>> previous(
      o.num_layers, std::vector<std::vector<int32_t>>(o.tokens_per_step));
  std::uniform_real_distribution<double> coin(0, 1);
  for (int64_t step = 0; step < o.steps; ++step) {
    for (int32_t layer = 0; layer < o.num_layers; ++layer) {
      if (!o.is_moe_layer.empty() && !o.is_moe_layer[layer]) continue;
      RoutingRecord r{step, layer, {}};
      for (int32_t t = 0; t < o.tokens_per_step; ++t) {
        std::vector<int32_t>& prev = previous[layer][t];
        if (prev.empty() || coin(rng) >= o.stickiness)
          prev = DrawDistinct(weights[layer], o.top_k, &rng);
        r.ids.insert(r.ids.end(), prev.begin(), prev.end());
      }
      trace.records.push_back(std::move(r));
    }
  }
  return trace;
}

}  // namespace expertd::engine
