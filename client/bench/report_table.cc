#include "client/bench/report_table.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/bench/report_json.h"

namespace expertd::bench {
namespace {

constexpr int kWidth = 50;

std::string Line(const std::string& key, const std::string& value) {
  return absl::StrFormat("%-40s %s\n", key + ":", value);
}
std::string Num(double v, int digits = 2) { return absl::StrFormat("%.*f", digits, v); }

std::string Header(const std::string& title, char fill) {
  const int pad = kWidth - static_cast<int>(title.size());
  const int left = pad / 2;
  return std::string(left, fill) + title + std::string(pad - left, fill) + "\n";
}

std::string DistributionBlock(const std::string& title, const std::string& abbrev,
                              const Distribution& d) {
  std::string out = Header(title, '-');
  absl::StrAppend(&out, Line("Mean " + abbrev + " (ms)", Num(d.mean)));
  absl::StrAppend(&out, Line("Median " + abbrev + " (ms)", Num(d.median)));
  absl::StrAppend(&out, Line("Std " + abbrev + " (ms)", Num(d.std)));
  for (const auto& [p, v] : d.percentiles) {
    if (p == 50) continue;  // the median
    absl::StrAppend(&out, Line("P" + PercentileWord(p) + " " + abbrev + " (ms)", Num(v)));
  }
  absl::StrAppend(&out, Line("Max " + abbrev + " (ms)", Num(d.max)));
  return out;
}

std::string ExpertBlock(const ExpertCacheReport& r) {
  std::string out = Header("Expert cache (" + r.source + ")", '-');
  if (!r.available) return out + Line("Status", "unavailable: " + r.reason);
  absl::StrAppend(&out, Line("Hits / misses", absl::StrCat(r.delta.hits, " / ", r.delta.misses)));
  absl::StrAppend(
      &out, Line("Hit rate", r.hit_rate < 0 ? "n/a (no expert lookups)" : Num(r.hit_rate, 4)));
  absl::StrAppend(&out, Line("Tokens processed (server)", absl::StrCat(r.delta.tokens)));
  absl::StrAppend(&out,
                  Line("Bytes paged host->device per token",
                       r.bytes_paged_per_token < 0 ? "n/a" : Num(r.bytes_paged_per_token, 1)));
  absl::StrAppend(&out, Line("Bytes disk->host per token",
                             r.disk_bytes_per_token < 0 ? "n/a" : Num(r.disk_bytes_per_token, 1)));
  absl::StrAppend(&out, Line("Prefetch issued / used / wasted",
                             absl::StrCat(r.delta.prefetch_issued, " / ", r.delta.prefetch_used,
                                          " / ", r.delta.prefetch_wasted)));
  absl::StrAppend(&out, Line("Stall (s)", Num(r.delta.stall_s, 3)));
  return out;
}

std::string LoadDescription(const RunConfig& c) {
  if (!c.open_loop) return absl::StrCat("concurrency ", c.concurrency);
  std::string rate = std::isinf(c.request_rate) ? "inf" : absl::StrFormat("%g", c.request_rate);
  std::string out =
      absl::StrCat("rate ", rate, " req/s, burstiness ", absl::StrFormat("%g", c.burstiness));
  if (c.max_concurrency > 0) absl::StrAppend(&out, ", max concurrency ", c.max_concurrency);
  return out;
}

}  // namespace

std::string ResultTable(const RunConfig& c, const BenchSummary& s,
                        const std::vector<ExpertCacheReport>& cache) {
  std::string out = Header(" Serving Benchmark Result ", '=');
  absl::StrAppend(&out, Line("Load", LoadDescription(c)));
  if (s.interrupted) absl::StrAppend(&out, Line("Interrupted", "yes (partial results)"));
  absl::StrAppend(&out, Line("Successful requests", absl::StrCat(s.completed)));
  absl::StrAppend(&out, Line("Failed requests", absl::StrCat(s.failed)));
  absl::StrAppend(&out, Line("Warm-up requests (excluded)", absl::StrCat(s.warmup_requests)));
  absl::StrAppend(&out, Line("Benchmark duration (s)", Num(s.duration_s)));
  absl::StrAppend(&out, Line("Total input tokens", absl::StrCat(s.total_input_tokens)));
  absl::StrAppend(&out, Line("Total generated tokens", absl::StrCat(s.total_output_tokens)));
  absl::StrAppend(&out, Line("Request throughput (req/s)", Num(s.request_throughput)));
  if (s.has_goodput) absl::StrAppend(&out, Line("Request goodput (req/s)", Num(s.request_goodput)));
  absl::StrAppend(&out, Line("Output token throughput (tok/s)", Num(s.output_throughput)));
  absl::StrAppend(&out,
                  Line("Peak output token throughput (tok/s)", Num(s.max_output_tokens_per_s)));
  absl::StrAppend(&out, Line("Peak concurrent requests", absl::StrCat(s.max_concurrent_requests)));
  absl::StrAppend(&out, Line("Total Token throughput (tok/s)", Num(s.total_token_throughput)));
  absl::StrAppend(&out, DistributionBlock("Time to First Token", "TTFT", s.ttft_ms));
  absl::StrAppend(&out,
                  DistributionBlock("Time per Output Token (excl. 1st token)", "TPOT", s.tpot_ms));
  absl::StrAppend(&out, DistributionBlock("Inter-token Latency", "ITL", s.itl_ms));
  absl::StrAppend(&out, DistributionBlock("End-to-end Latency", "E2EL", s.e2el_ms));
  absl::StrAppend(&out, Header("Outcomes", '-'));
  for (const auto& [name, n] : s.outcomes) absl::StrAppend(&out, Line(name, absl::StrCat(n)));
  for (const ExpertCacheReport& r : cache) absl::StrAppend(&out, ExpertBlock(r));
  absl::StrAppend(&out, std::string(kWidth, '='), "\n");
  return out;
}

}  // namespace expertd::bench
