// expert-bench's command line: the flags, their checks, and the load points
// they describe (one for a single run, several for a sweep).
#ifndef EXPERTD_CLIENT_BENCH_OPTIONS_H_
#define EXPERTD_CLIENT_BENCH_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench/load_driver.h"
#include "client/bench/summary.h"

namespace expertd::bench {

struct BenchOptions {
  std::string server = "127.0.0.1:50051";
  // Which API the requests use: grpc (Generate), openai (/v1/completions) or
  // openai-chat (/v1/chat/completions) on openai_server (expertd --http_listen).
  // Model info and expert stats still come over gRPC (--server).
  std::string backend = "grpc";
  std::string openai_server;  // host:port
  std::string api_key;
  int64_t num_channels = 4;
  double timeout_s = 600;
  double connect_timeout_s = 30;
  std::string model;
  // Load (at most one of concurrency / request_rate / a sweep list).
  int64_t concurrency = 0;
  std::string request_rate;  // a number or "inf"
  double burstiness = 1;
  int64_t max_concurrency = 0;
  std::string sweep_concurrency;  // "1,8,32"
  std::string sweep_rates;        // "1,2,4,inf"
  int64_t num_requests = 0;
  double duration_s = 0;
  int64_t warmup_requests = 0;
  double warmup_s = 0;
  // Prompts.
  std::string dataset;
  std::string input_len = "128";
  std::string output_len = "128";
  bool ignore_eos = false;
  double temperature = 0;
  double top_p = 1;
  int64_t top_k = 0;
  int64_t seed = 0;
  // Results.
  double slo_ttft_ms = 0, slo_tpot_ms = 0, slo_e2el_ms = 0;
  std::string percentiles = "50,90,95,99";
  std::string out_dir = "bench_out";
  std::string label = "expert-bench";
  bool save_detailed = false;
  double progress_interval_s = 5;
  // Expert-cache statistics.
  std::string metrics_url;
  std::string admin_token_file;
};

// Parses argv. Returns false in *run when --help was given (usage printed).
absl::Status ParseBenchOptions(int argc, char** argv, BenchOptions* options, bool* run);

// The load of each point: one entry, or one per sweep value (in the given order).
absl::StatusOr<std::vector<LoadOptions>> LoadPoints(const BenchOptions& options);

absl::StatusOr<std::vector<double>> ParsePercentiles(const std::string& list);
SloOptions Slo(const BenchOptions& options);

// The admin bearer token from --admin_token_file (whitespace stripped); "" without one.
absl::StatusOr<std::string> ReadAdminToken(const BenchOptions& options);

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_OPTIONS_H_
