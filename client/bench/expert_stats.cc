#include "client/bench/expert_stats.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/bench/prometheus_text.h"
#include "httplib.h"
#include "proto/expertd.grpc.pb.h"

namespace expertd::bench {
namespace {

constexpr double kSnapshotTimeoutS = 10;

double Seconds(const google::protobuf::Duration& d) {
  return static_cast<double>(d.seconds()) + d.nanos() * 1e-9;
}

ExpertSnapshot Failed(std::string why) {
  ExpertSnapshot s;
  s.error = std::move(why);
  return s;
}

}  // namespace

ExpertSnapshot ScrapeMetrics(const std::string& url, double timeout_s) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://"))
    return Failed(absl::StrCat("--metrics_url '", url, "' is not http://"));
  const size_t slash = rest.find('/');
  const std::string host_port(rest.substr(0, slash));
  const std::string path =
      slash == absl::string_view::npos ? "/metrics" : std::string(rest.substr(slash));
  httplib::Client client("http://" + host_port);
  const auto timeout = std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6));
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  auto res = client.Get(path.c_str());
  if (!res) return Failed(absl::StrCat("GET ", url, ": ", httplib::to_string(res.error())));
  if (res->status != 200) return Failed(absl::StrCat("GET ", url, ": HTTP ", res->status));
  auto samples = ParsePrometheusText(res->body);
  if (!samples.ok()) return Failed(std::string(samples.status().message()));
  ExpertSnapshot s;
  s.ok = true;
  ExpertCounters& c = s.counters;
  c.hits = SumSamples(*samples, "expertd:expert_cache_hits_total");
  c.misses = SumSamples(*samples, "expertd:expert_cache_misses_total");
  c.prefetch_issued = SumSamples(*samples, "expertd:expert_prefetch_issued_total");
  c.prefetch_used = SumSamples(*samples, "expertd:expert_prefetch_used_total");
  c.prefetch_wasted = SumSamples(*samples, "expertd:expert_prefetch_wasted_total");
  c.stall_s = SumSamples(*samples, "expertd:expert_stall_seconds_total");
  c.bytes_host_to_device =
      SumSamples(*samples, "expertd:expert_bytes_moved_total", {{"path", "host_to_device"}});
  c.bytes_disk_to_host =
      SumSamples(*samples, "expertd:expert_bytes_moved_total", {{"path", "disk_to_host"}});
  c.tokens = SumSamples(*samples, "expertd:prompt_tokens_total") +
             SumSamples(*samples, "expertd:generation_tokens_total");
  return s;
}

ExpertSnapshot QueryAdminStats(const std::shared_ptr<grpc::Channel>& channel,
                               const std::string& token, double timeout_s) {
  auto stub = v1::AdminService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  ctx.AddMetadata("authorization", "Bearer " + token);
  v1::ExpertStats stats;
  grpc::Status st = stub->GetExpertStats(&ctx, v1::GetExpertStatsRequest(), &stats);
  if (!st.ok()) {
    return Failed(
        absl::StrCat("GetExpertStats: ",
                     absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code())), ": ",
                     st.error_message()));
  }
  ExpertSnapshot s;
  s.ok = true;
  const v1::ExpertCounters& t = stats.totals();
  s.counters = {static_cast<double>(t.hits()),
                static_cast<double>(t.misses()),
                static_cast<double>(t.prefetch_issued()),
                static_cast<double>(t.prefetch_used()),
                static_cast<double>(t.prefetch_wasted()),
                Seconds(t.stall_time()),
                static_cast<double>(t.bytes_host_to_device()),
                static_cast<double>(t.bytes_disk_to_host()),
                static_cast<double>(stats.tokens_processed())};
  return s;
}

ExpertCacheReport DiffSnapshots(const std::string& source, const ExpertSnapshot& before,
                                const ExpertSnapshot& after) {
  ExpertCacheReport r;
  r.source = source;
  if (!before.ok || !after.ok) {
    r.reason = !before.ok ? before.error : after.error;
    return r;
  }
  r.available = true;
  const ExpertCounters& a = before.counters;
  const ExpertCounters& b = after.counters;
  r.delta = {b.hits - a.hits,
             b.misses - a.misses,
             b.prefetch_issued - a.prefetch_issued,
             b.prefetch_used - a.prefetch_used,
             b.prefetch_wasted - a.prefetch_wasted,
             b.stall_s - a.stall_s,
             b.bytes_host_to_device - a.bytes_host_to_device,
             b.bytes_disk_to_host - a.bytes_disk_to_host,
             b.tokens - a.tokens};
  const ExpertCounters& d = r.delta;
  if (d.hits + d.misses > 0) r.hit_rate = d.hits / (d.hits + d.misses);
  if (d.tokens > 0) {
    r.bytes_paged_per_token = d.bytes_host_to_device / d.tokens;
    r.disk_bytes_per_token = d.bytes_disk_to_host / d.tokens;
  }
  return r;
}

ExpertStatsCollector::ExpertStatsCollector(std::string metrics_url,
                                           std::shared_ptr<grpc::Channel> channel,
                                           std::string admin_token)
    : metrics_url_(std::move(metrics_url)),
      channel_(std::move(channel)),
      admin_token_(std::move(admin_token)) {}

ExpertStatsCollector::~ExpertStatsCollector() {
  if (before_thread_.joinable()) before_thread_.join();
}

std::vector<ExpertSnapshot> ExpertStatsCollector::Snapshot() const {
  std::vector<ExpertSnapshot> out;
  if (!metrics_url_.empty()) out.push_back(ScrapeMetrics(metrics_url_, kSnapshotTimeoutS));
  if (!admin_token_.empty())
    out.push_back(QueryAdminStats(channel_, admin_token_, kSnapshotTimeoutS));
  return out;
}

void ExpertStatsCollector::StartBefore() {
  started_ = true;
  before_thread_ = std::thread([this] { before_ = Snapshot(); });
}

void ExpertStatsCollector::FinishAfter() {
  if (before_thread_.joinable()) before_thread_.join();
  after_ = Snapshot();
  finished_ = true;
}

std::vector<ExpertCacheReport> ExpertStatsCollector::Reports() const {
  std::vector<std::string> sources;
  if (!metrics_url_.empty()) sources.push_back("metrics");
  if (!admin_token_.empty()) sources.push_back("admin");
  std::vector<ExpertCacheReport> out;
  if (sources.empty()) {
    ExpertCacheReport none;
    none.source = "none";
    none.reason = "no --metrics_url or --admin_token_file given";
    out.push_back(none);
    return out;
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!started_ || !finished_ || i >= before_.size() || i >= after_.size()) {
      ExpertCacheReport r;
      r.source = sources[i];
      r.reason = "measurement never started";
      out.push_back(r);
    } else {
      out.push_back(DiffSnapshots(sources[i], before_[i], after_[i]));
    }
  }
  return out;
}

}  // namespace expertd::bench
