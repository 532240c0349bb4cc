// RunConfig: how a run was set up, echoed into its reports (JSON metadata,
// table header) so a result file says what produced it.
#ifndef EXPERTD_CLIENT_BENCH_RUN_CONFIG_H_
#define EXPERTD_CLIENT_BENCH_RUN_CONFIG_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "client/bench/summary.h"

namespace expertd::bench {

struct RunConfig {
  std::string label;
  std::string date;            // local time, vLLM's format YYYYMMDD-HHMMSS
  std::string server;          // address
  std::string server_version;  // ServerInfo.version
  std::string model_id;        // ModelInfo.model_name
  bool open_loop = false;
  int64_t concurrency = 0;                                        // closed loop
  double request_rate = std::numeric_limits<double>::infinity();  // open loop
  double burstiness = 1;
  int64_t max_concurrency = 0;  // 0: none
  int64_t num_requests = 0;     // requested measured requests (0: duration)
  double duration_limit_s = 0;
  int64_t warmup_requests = 0;
  double warmup_s = 0;
  uint64_t seed = 0;
  std::string dataset;  // JSONL path, or "" for synthetic
  std::string input_len, output_len;
  bool ignore_eos = false;
  double temperature = 0;
  int num_channels = 1;
  SloOptions slo;
  std::vector<double> percentiles;
};

// "c8" for concurrency 8, "r2.5" for 2.5 req/s, "rinf": the name of a sweep point.
std::string PointName(const RunConfig& config);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_RUN_CONFIG_H_
