// expert-bench: the latency / throughput benchmark client for expertd.
// See docs/bench.md for the flags, the metric definitions and the output
// schema. Ctrl-C stops issuing, cancels the requests in flight and writes the
// partial results (exit 130); a second Ctrl-C exits at once.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/bench/bench_session.h"
#include "client/bench/options.h"
#include "client/bench/plot.h"
#include "client/bench/report_json.h"

namespace expertd::bench {
namespace {

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Blocks SIGINT and SIGTERM in this thread and so in every thread started
// later (gRPC's included): before any other thread exists, they are then
// only ever taken by WatchSignals' sigwait.
void BlockSignals() {
  sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// The session Ctrl-C interrupts; null until connected (Ctrl-C then exits at
// once: there is nothing to write yet).
absl::Mutex g_session_mu;
BenchSession* g_session ABSL_GUARDED_BY(g_session_mu) = nullptr;

// Makes `session` the one Ctrl-C interrupts, until destroyed.
class InterruptTarget {
 public:
  explicit InterruptTarget(BenchSession* session) {
    absl::MutexLock lock(&g_session_mu);
    g_session = session;
  }
  ~InterruptTarget() {
    absl::MutexLock lock(&g_session_mu);
    g_session = nullptr;
  }
};

// Handles SIGINT / SIGTERM on a dedicated thread.
void WatchSignals() {
  std::thread([] {
    const sigset_t set = StopSignals();
    int seen = 0;
    while (true) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      absl::MutexLock lock(&g_session_mu);
      if (++seen > 1 || g_session == nullptr) _exit(130);
      std::fprintf(
          stderr,
          "expert-bench: %s: stopping, cancelling requests in flight (again to quit at once)\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
      g_session->Interrupt();
    }
  }).detach();
}

PlotPoint ToPlotPoint(const PointResult& r) {
  auto p99 = [](const Distribution& d) { return d.At(99) >= 0 ? d.At(99) : d.max; };
  return {PointName(r.config),    r.summary.output_throughput, r.summary.ttft_ms.median,
          p99(r.summary.ttft_ms), r.summary.tpot_ms.median,    p99(r.summary.tpot_ms)};
}

void PrintSweepSummary(const std::vector<PointResult>& points) {
  std::printf("%-8s %10s %10s %12s %12s %12s %12s %8s\n", "point", "req/s", "out tok/s",
              "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "failed");
  for (const PointResult& r : points) {
    const PlotPoint p = ToPlotPoint(r);
    std::printf("%-8s %10.2f %10.1f %12.2f %12.2f %12.2f %12.2f %8lld\n", p.name.c_str(),
                r.summary.request_throughput, p.output_throughput, p.ttft_p50_ms, p.ttft_p99_ms,
                p.tpot_p50_ms, p.tpot_p99_ms, static_cast<long long>(r.summary.failed));
  }
}

int WriteSweep(const BenchOptions& o, const BenchSession& session,
               const std::vector<PointResult>& points) {
  const std::string base = absl::StrCat(o.out_dir, "/", o.label, "-sweep");
  nlohmann::ordered_json combined = {{"schema", "expert-bench-sweep/1"},
                                     {"label", o.label},
                                     {"model_id", session.model().model_name()},
                                     {"interrupted", session.interrupted()},
                                     {"points", nlohmann::ordered_json::array()}};
  std::vector<PlotPoint> plot;
  for (const PointResult& r : points) {
    combined["points"].push_back(r.json);
    plot.push_back(ToPlotPoint(r));
  }
  PrintSweepSummary(points);
  absl::Status st = WriteJsonFile(base + ".json", combined);
  if (!st.ok()) {
    std::fprintf(stderr, "expert-bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  st = WriteSweepPlot(
      base, absl::StrCat("expert-bench ", o.label, ": ", session.model().model_name()), plot);
  if (!st.ok()) std::fprintf(stderr, "expert-bench: plot: %s\n", std::string(st.message()).c_str());
  std::fprintf(stderr, "expert-bench: wrote %s.json%s\n", base.c_str(), st.ok() ? " and .png" : "");
  return 0;
}

int Main(int argc, char** argv) {
  BlockSignals();
  WatchSignals();
  BenchOptions options;
  bool run = true;
  absl::Status st = ParseBenchOptions(argc, argv, &options, &run);
  if (!st.ok()) {
    std::fprintf(stderr, "expert-bench: %s\n(see --help)\n", std::string(st.message()).c_str());
    return 2;
  }
  if (!run) return 0;
  auto loads = LoadPoints(options);
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "expert-bench: cannot create --out_dir '%s': %s\n",
                 options.out_dir.c_str(), ec.message().c_str());
    return 1;
  }
  auto session = BenchSession::Connect(options);
  if (!session.ok()) {
    std::fprintf(stderr, "expert-bench: %s\n", std::string(session.status().message()).c_str());
    return 1;
  }
  InterruptTarget target(session->get());
  const bool sweep =
      loads->size() > 1 || !options.sweep_concurrency.empty() || !options.sweep_rates.empty();
  std::vector<PointResult> points;
  for (const LoadOptions& load : *loads) {
    RunConfig name_only;
    name_only.open_loop = load.open_loop;
    name_only.concurrency = load.concurrency;
    name_only.request_rate = load.request_rate;
    const std::string base =
        sweep ? absl::StrCat(options.out_dir, "/", options.label, "-", PointName(name_only))
              : absl::StrCat(options.out_dir, "/", options.label);
    auto point = (*session)->RunPoint(load, base);
    if (!point.ok()) {
      if ((*session)->interrupted()) break;
      std::fprintf(stderr, "expert-bench: %s\n", std::string(point.status().message()).c_str());
      return 1;
    }
    points.push_back(*std::move(point));
    if ((*session)->interrupted()) break;
  }
  if (sweep && WriteSweep(options, **session, points) != 0) return 1;
  return (*session)->interrupted() ? 130 : 0;
}

}  // namespace
}  // namespace expertd::bench

int main(int argc, char** argv) { return expertd::bench::Main(argc, argv); }
