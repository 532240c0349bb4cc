#include "client/bench/stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace expertd::bench {

double Percentile(const std::vector<double>& sorted, double p) {
  assert(p >= 0 && p <= 100);
  if (sorted.empty()) return 0;
  const double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = static_cast<size_t>(std::ceil(rank));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

double Distribution::At(double p) const {
  for (const auto& [q, v] : percentiles) {
    if (q == p) return v;
  }
  return -1;
}

Distribution Summarize(std::vector<double> values, const std::vector<double>& percentiles) {
  Distribution d;
  for (double p : percentiles) d.percentiles.emplace_back(p, 0.0);
  d.count = values.size();
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (double v : values) sq += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(sq / static_cast<double>(values.size()));
  d.median = Percentile(values, 50);
  d.min = values.front();
  d.max = values.back();
  for (auto& [p, v] : d.percentiles) v = Percentile(values, p);
  return d;
}

}  // namespace expertd::bench
