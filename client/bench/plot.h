// The sweep plot: latency percentiles against achieved throughput, one point
// per sweep step, drawn by gnuplot (Debian's gnuplot-nox, pngcairo terminal).
// Writes <base>.dat (the points), <base>.gp (the script) and runs
// `gnuplot <base>.gp` to make <base>.png: two panels, TTFT p50/p99 and
// TPOT p50/p99 (ms) vs output tokens/s, each point labelled with its step
// (c8, r2.5, ...). The y axis turns logarithmic when values span > 20x.
#ifndef EXPERTD_CLIENT_BENCH_PLOT_H_
#define EXPERTD_CLIENT_BENCH_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace expertd::bench {

struct PlotPoint {
  std::string name;          // e.g. "c8"
  double output_throughput;  // tok/s
  double ttft_p50_ms, ttft_p99_ms;
  double tpot_p50_ms, tpot_p99_ms;
};

// The gnuplot script for `points` drawing <base>.dat into <base>.png.
std::string GnuplotScript(const std::string& base, const std::string& title,
                          const std::vector<PlotPoint>& points);

// Writes the files and runs gnuplot; an error says what failed (the .dat and
// .gp files stay for a manual run). The script names the files by absolute
// path, so `gnuplot <base>.gp` works from any directory.
absl::Status WriteSweepPlot(const std::string& base, const std::string& title,
                            const std::vector<PlotPoint>& points);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_PLOT_H_
