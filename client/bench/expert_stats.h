// Expert-cache statistics around a benchmark run, from two sources:
//   "metrics"  the daemon's Prometheus endpoint (--metrics_url), summing the
//              expertd:expert_* counters over layers (docs/operations.md);
//              tokens = expertd:prompt_tokens_total + generation_tokens_total
//   "admin"    AdminService.GetExpertStats with the bearer token
//              (--admin_token_file); tokens = ExpertStats.tokens_processed
// A snapshot is taken when measurement starts and when the run ends; the
// report is the difference, with
//   hit_rate               hits / (hits + misses)            (-1: no lookups)
//   bytes_paged_per_token  bytes host->device / tokens        (-1: no tokens)
//   disk_bytes_per_token   bytes disk->host / tokens          (-1: no tokens)
// Counters are server-wide: other clients' traffic during the run counts too,
// and so do warm-up requests still in flight when measurement starts.
// A source that fails (unreachable, UNIMPLEMENTED, bad token) is reported as
// unavailable with the reason; it never fails the run.
#ifndef EXPERTD_CLIENT_BENCH_EXPERT_STATS_H_
#define EXPERTD_CLIENT_BENCH_EXPERT_STATS_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace expertd::bench {

struct ExpertCounters {
  double hits = 0;
  double misses = 0;
  double prefetch_issued = 0;
  double prefetch_used = 0;
  double prefetch_wasted = 0;
  double stall_s = 0;
  double bytes_host_to_device = 0;
  double bytes_disk_to_host = 0;
  double tokens = 0;
};

struct ExpertSnapshot {
  bool ok = false;
  std::string error;  // why not, when !ok
  ExpertCounters counters;
};

// GET `url` (http://host:port/path) and sum the expert counters.
ExpertSnapshot ScrapeMetrics(const std::string& url, double timeout_s);
// AdminService.GetExpertStats totals.
ExpertSnapshot QueryAdminStats(const std::shared_ptr<grpc::Channel>& channel,
                               const std::string& token, double timeout_s);

struct ExpertCacheReport {
  std::string source;  // "metrics" or "admin"
  bool available = false;
  std::string reason;  // when unavailable
  ExpertCounters delta;
  double hit_rate = -1;
  double bytes_paged_per_token = -1;
  double disk_bytes_per_token = -1;
};

ExpertCacheReport DiffSnapshots(const std::string& source, const ExpertSnapshot& before,
                                const ExpertSnapshot& after);

// Takes the before snapshot on a background thread (so the load is not
// delayed) and the after snapshot synchronously. Not thread-safe: call
// StartBefore, then FinishAfter, from one thread.
class ExpertStatsCollector {
 public:
  // Empty `metrics_url` / `admin_token`: that source is not queried.
  ExpertStatsCollector(std::string metrics_url, std::shared_ptr<grpc::Channel> channel,
                       std::string admin_token);
  ~ExpertStatsCollector();

  void StartBefore();
  void FinishAfter();
  // One report per source, in the order metrics, admin; a single "none"
  // entry (unavailable) when no source is configured.
  std::vector<ExpertCacheReport> Reports() const;

 private:
  std::vector<ExpertSnapshot> Snapshot() const;

  const std::string metrics_url_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::string admin_token_;
  std::thread before_thread_;
  std::vector<ExpertSnapshot> before_, after_;
  bool started_ = false, finished_ = false;
};

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_EXPERT_STATS_H_
