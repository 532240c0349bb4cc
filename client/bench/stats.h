// Summary statistics for latency samples, defined as vLLM's benchmark
// (numpy) defines them, so our numbers and `vllm bench serve`'s compare:
//   mean    arithmetic mean
//   std     population standard deviation (numpy's default, ddof = 0)
//   median  the 50th percentile
//   p-th percentile (p in [0, 100]): numpy.percentile's default "linear"
//           method: with the n values sorted ascending x[0..n-1], the rank
//           r = p/100 * (n - 1), and the value x[floor r] + (x[ceil r] -
//           x[floor r]) * (r - floor r). p0 = min, p100 = max.
// An empty sample set summarises to all zeros with count 0 (vLLM reports 0
// for an empty set too); `count` tells the two apart.
#ifndef EXPERTD_CLIENT_BENCH_STATS_H_
#define EXPERTD_CLIENT_BENCH_STATS_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace expertd::bench {

// The p-th percentile of `sorted` (ascending), numpy's linear method.
// REQUIRES: sorted is ascending; 0 <= p <= 100. Empty -> 0.
double Percentile(const std::vector<double>& sorted, double p);

struct Distribution {
  size_t count = 0;
  double mean = 0;
  double std = 0;
  double median = 0;
  double min = 0;
  double max = 0;
  // (p, value) for each requested percentile, in the order requested.
  std::vector<std::pair<double, double>> percentiles;

  // The value for percentile p if it was requested, else the computed value is
  // not available and this returns -1.
  double At(double p) const;
};

// Summarises `values` (any order; copied and sorted). `percentiles` are in
// [0, 100].
Distribution Summarize(std::vector<double> values, const std::vector<double>& percentiles);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_STATS_H_
