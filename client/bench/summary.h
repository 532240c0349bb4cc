// BenchSummary: one run's results, computed from its measured (non-warm-up)
// records with vLLM's definitions (`vllm bench serve`, calculate_metrics):
//   completed            requests with outcome "ok"
//   failed               issued - completed (errors and cancels; see outcomes)
//   duration             measurement window: first measured request issued ->
//                        last one finished (seconds)
//   total_input_tokens / total_output_tokens   over completed requests
//   request_throughput   completed / duration; output_throughput and
//                        total_token_throughput likewise in tokens/s
//   TTFT                 start -> first message carrying tokens
//   TPOT                 (E2E - TTFT) / (output_tokens - 1), requests with >= 2 tokens
//   ITL                  every gap between consecutive token-carrying messages
//                        (one sample per message: a message carrying k tokens
//                        gives one gap, as vLLM counts one per streamed chunk)
//   E2E (e2el)           start -> final status
//   goodput              completed requests meeting every given SLO
//                        (TTFT, TPOT, E2E in ms; TPOT of a 1-token request is
//                        0) per second of duration
//   max_output_tokens_per_s   most tokens received in one 1-second bucket of
//                        the window; max_concurrent_requests: peak number of
//                        measured requests in flight at once
// Latency distributions cover completed requests only.
#ifndef EXPERTD_CLIENT_BENCH_SUMMARY_H_
#define EXPERTD_CLIENT_BENCH_SUMMARY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/bench/load_driver.h"
#include "client/bench/stats.h"

namespace expertd::bench {

struct SloOptions {
  double ttft_ms = 0;  // 0: no SLO on this metric
  double tpot_ms = 0;
  double e2el_ms = 0;
  bool any() const { return ttft_ms > 0 || tpot_ms > 0 || e2el_ms > 0; }
};

struct BenchSummary {
  int64_t issued = 0;
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> outcomes;  // every outcome name -> count ("ok" included)
  int64_t warmup_requests = 0;
  bool interrupted = false;
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  bool has_goodput = false;  // some SLO was given
  int64_t good_requests = 0;
  double request_goodput = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
  double max_output_tokens_per_s = 0;
  int64_t max_concurrent_requests = 0;
  // Completed requests whose streamed token count differs from the server's
  // usage.completion_tokens (should be 0).
  int64_t usage_mismatches = 0;
};

BenchSummary SummarizeRun(const RunResult& run, const SloOptions& slo,
                          const std::vector<double>& percentiles);

// True if `r` meets every SLO that is set.
bool MeetsSlo(const RequestRecord& r, const SloOptions& slo);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_SUMMARY_H_
