#include "client/bench/summary.h"

#include <algorithm>
#include <cmath>

namespace expertd::bench {

bool MeetsSlo(const RequestRecord& r, const SloOptions& slo) {
  if (!r.ok() || !r.has_first_token()) return false;
  const double tpot_ms = r.output_tokens > 1 ? r.tpot_s() * 1e3 : 0;
  if (slo.ttft_ms > 0 && r.ttft_s() * 1e3 > slo.ttft_ms) return false;
  if (slo.tpot_ms > 0 && tpot_ms > slo.tpot_ms) return false;
  if (slo.e2el_ms > 0 && r.e2e_s() * 1e3 > slo.e2el_ms) return false;
  return true;
}

namespace {

// Peak of requests in flight at once (an end at time t comes before a start at t).
int64_t MaxConcurrent(const std::vector<const RequestRecord*>& measured) {
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord* r : measured) {
    events.emplace_back(r->start_s, +1);
    events.emplace_back(r->end_s, -1);
  }
  std::sort(events.begin(), events.end());
  int64_t now = 0, peak = 0;
  for (const auto& e : events) peak = std::max(peak, now += e.second);
  return peak;
}

double MaxTokensPerSecond(const std::vector<const RequestRecord*>& completed, double origin_s) {
  std::map<int64_t, int64_t> buckets;
  for (const RequestRecord* r : completed) {
    for (size_t i = 0; i < r->message_times_s.size(); ++i) {
      buckets[static_cast<int64_t>(std::floor(r->message_times_s[i] - origin_s))] +=
          r->message_tokens[i];
    }
  }
  int64_t peak = 0;
  for (const auto& [second, tokens] : buckets) peak = std::max(peak, tokens);
  return static_cast<double>(peak);
}

}  // namespace

BenchSummary SummarizeRun(const RunResult& run, const SloOptions& slo,
                          const std::vector<double>& percentiles) {
  BenchSummary s;
  s.issued = run.issued;
  s.warmup_requests = run.warmup_issued;
  s.interrupted = run.interrupted;
  s.duration_s = run.measure_end_s - run.measure_start_s;
  s.has_goodput = slo.any();
  std::vector<const RequestRecord*> measured, completed;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestRecord& r : run.records) {
    if (r.warmup) continue;
    measured.push_back(&r);
    ++s.outcomes[r.outcome];
    if (!r.ok()) continue;
    completed.push_back(&r);
    s.total_input_tokens += std::max<int64_t>(r.input_tokens, 0);
    s.total_output_tokens += r.output_tokens;
    if (r.server_output_tokens >= 0 && r.server_output_tokens != r.output_tokens)
      ++s.usage_mismatches;
    if (r.has_first_token()) ttft.push_back(r.ttft_s() * 1e3);
    if (r.output_tokens > 1) tpot.push_back(r.tpot_s() * 1e3);
    for (size_t i = 1; i < r.message_times_s.size(); ++i) {
      itl.push_back((r.message_times_s[i] - r.message_times_s[i - 1]) * 1e3);
    }
    e2el.push_back(r.e2e_s() * 1e3);
    if (s.has_goodput && MeetsSlo(r, slo)) ++s.good_requests;
  }
  s.completed = static_cast<int64_t>(completed.size());
  s.failed = s.issued - s.completed;
  if (s.duration_s > 0) {
    s.request_throughput = s.completed / s.duration_s;
    s.output_throughput = s.total_output_tokens / s.duration_s;
    s.total_token_throughput = (s.total_input_tokens + s.total_output_tokens) / s.duration_s;
    s.request_goodput = s.good_requests / s.duration_s;
  }
  s.ttft_ms = Summarize(std::move(ttft), percentiles);
  s.tpot_ms = Summarize(std::move(tpot), percentiles);
  s.itl_ms = Summarize(std::move(itl), percentiles);
  s.e2el_ms = Summarize(std::move(e2el), percentiles);
  s.max_output_tokens_per_s = MaxTokensPerSecond(completed, run.measure_start_s);
  s.max_concurrent_requests = MaxConcurrent(measured);
  return s;
}

}  // namespace expertd::bench
