#include "client/bench/plot.h"

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

extern char** environ;

namespace expertd::bench {
namespace {

// Values span more than 20x: a log axis keeps the low points readable.
bool WantsLog(const std::vector<double>& values) {
  double lo = 0, hi = 0;
  for (double v : values) {
    if (v <= 0) return false;
    lo = lo == 0 ? v : std::min(lo, v);
    hi = std::max(hi, v);
  }
  return lo > 0 && hi / lo > 20;
}

std::string Panel(const std::string& dat, const std::string& what, int p50_col, int p99_col,
                  bool log) {
  return absl::StrCat(log ? "set logscale y\n" : "unset logscale y\n", "set ylabel '", what,
                      " (ms)'\n", "plot '", dat, "' using 2:", p50_col,
                      " with linespoints lw 2 pt 7 title '", what, " p50', \\\n", "     '", dat,
                      "' using 2:", p99_col, " with linespoints lw 2 pt 5 title '", what,
                      " p99', \\\n", "     '", dat, "' using 2:", p99_col,
                      ":1 with labels offset 0,1 font ',9' notitle\n");
}

absl::Status RunGnuplot(const std::string& script) {
  const char* argv[] = {"gnuplot", script.c_str(), nullptr};
  pid_t pid;
  int rc = posix_spawnp(&pid, "gnuplot", nullptr, nullptr, const_cast<char* const*>(argv), environ);
  if (rc != 0)
    return absl::UnavailableError("cannot run gnuplot (install gnuplot-nox; tools/setup.sh does)");
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot ", script, " failed"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string GnuplotScript(const std::string& base, const std::string& title,
                          const std::vector<PlotPoint>& points) {
  std::vector<double> ttft, tpot;
  for (const PlotPoint& p : points) {
    ttft.insert(ttft.end(), {p.ttft_p50_ms, p.ttft_p99_ms});
    tpot.insert(tpot.end(), {p.tpot_p50_ms, p.tpot_p99_ms});
  }
  const std::string dat = base + ".dat";
  return absl::StrCat("# expert-bench sweep plot; regenerate with: gnuplot ", base, ".gp\n",
                      "set terminal pngcairo size 1400,560 noenhanced font 'sans,11'\n",
                      "set output '", base, ".png'\n", "set multiplot layout 1,2 title '", title,
                      "'\n", "set grid\n", "set key top left\n",
                      "set xlabel 'achieved output throughput (tok/s)'\n",
                      "set offsets graph 0.05, graph 0.08, graph 0.15, graph 0.05\n",
                      "set autoscale yfix\n", Panel(dat, "TTFT", 3, 4, WantsLog(ttft)),
                      Panel(dat, "TPOT", 5, 6, WantsLog(tpot)), "unset multiplot\n");
}

absl::Status WriteSweepPlot(const std::string& relative_base, const std::string& title,
                            const std::vector<PlotPoint>& points) {
  // Absolute, so the script works from any directory.
  std::error_code ec;
  const std::string base = std::filesystem::absolute(relative_base, ec).string();
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad plot path '", relative_base, "'"));
  if (base.find('\'') != std::string::npos || title.find('\'') != std::string::npos) {
    return absl::InvalidArgumentError("plot paths and titles may not contain a single quote");
  }
  {
    std::ofstream dat(base + ".dat");
    dat << "# name output_tok_per_s ttft_p50_ms ttft_p99_ms tpot_p50_ms tpot_p99_ms\n";
    for (const PlotPoint& p : points) {
      dat << absl::StrFormat("%s %.6g %.6g %.6g %.6g %.6g\n", p.name, p.output_throughput,
                             p.ttft_p50_ms, p.ttft_p99_ms, p.tpot_p50_ms, p.tpot_p99_ms);
    }
    std::ofstream gp(base + ".gp");
    gp << GnuplotScript(base, title, points);
    if (!dat || !gp) return absl::InternalError(absl::StrCat("cannot write ", base, ".dat/.gp"));
  }
  return RunGnuplot(base + ".gp");
}

}  // namespace expertd::bench
