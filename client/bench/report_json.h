// The result JSON of one run (schema: docs/bench.md, "schema":
// "expert-bench/1"). Keys that `vllm bench serve` also writes have its names
// and units (duration s, latencies ms, throughputs per s): completed, failed,
// total_input_tokens, total_output_tokens, request_throughput,
// request_goodput, output_throughput, total_token_throughput,
// max_output_tokens_per_s, max_concurrent_requests, {mean,median,std,pNN}_
// {ttft,tpot,itl,e2el}_ms, request_rate, burstiness, max_concurrency, ...;
// with `detailed`, also its per-request arrays (input_lens, output_lens,
// ttfts, itls, latencies in seconds, errors).
#ifndef EXPERTD_CLIENT_BENCH_REPORT_JSON_H_
#define EXPERTD_CLIENT_BENCH_REPORT_JSON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/bench/expert_stats.h"
#include "client/bench/load_driver.h"
#include "client/bench/run_config.h"
#include "client/bench/summary.h"
#include "nlohmann/json.hpp"

namespace expertd::bench {

// `detailed` may be null (summary only).
nlohmann::ordered_json ResultJson(const RunConfig& config, const BenchSummary& summary,
                                  const std::vector<ExpertCacheReport>& expert_cache,
                                  const RunResult* detailed);

// "99" for 99, "99.9" for 99.9: vLLM's percentile key word.
std::string PercentileWord(double p);

absl::Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& json);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_REPORT_JSON_H_
