// The human-readable result block, laid out like `vllm bench serve`'s
// ("============ Serving Benchmark Result ============"), plus outcomes by
// code and the expert-cache numbers.
#ifndef EXPERTD_CLIENT_BENCH_REPORT_TABLE_H_
#define EXPERTD_CLIENT_BENCH_REPORT_TABLE_H_

#include <string>
#include <vector>

#include "client/bench/expert_stats.h"
#include "client/bench/run_config.h"
#include "client/bench/summary.h"

namespace expertd::bench {

std::string ResultTable(const RunConfig& config, const BenchSummary& summary,
                        const std::vector<ExpertCacheReport>& expert_cache);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_REPORT_TABLE_H_
