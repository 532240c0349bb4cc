// Per-request CSV: one row per request (warm-up rows too, marked in `phase`),
// RFC 4180 quoting. Columns (times in ms from the run's start or of the
// request; an empty cell = not applicable):
//   index, phase (warmup|measure), outcome, finish_reason, scheduled_ms
//   (open loop), start_ms, ttft_ms, e2e_ms, tpot_ms, input_tokens,
//   output_tokens (received), server_output_tokens (usage), max_new_tokens,
//   messages (token-carrying), itl_mean_ms, itl_max_ms, server_queue_ms,
//   server_ttft_ms, prompt_hash (16 hex digits), error
#ifndef EXPERTD_CLIENT_BENCH_REPORT_CSV_H_
#define EXPERTD_CLIENT_BENCH_REPORT_CSV_H_

#include <string>

#include "absl/status/status.h"
#include "client/bench/load_driver.h"

namespace expertd::bench {

std::string RequestsCsv(const RunResult& run);
absl::Status WriteRequestsCsv(const std::string& path, const RunResult& run);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_REPORT_CSV_H_
