// BenchSession: one expert-bench invocation against one daemon. Connect()
// reads the served model (GetModelInfo: name, vocabulary, context, special
// tokens) and server version (GetServerInfo) and loads the prompt file;
// RunPoint() runs one load point and writes its reports:
//   <base>.json  result JSON (report_json.h), <base>.csv  per-request rows,
//   the table on stdout.
// Interrupt() (any thread) stops the point in progress and every later one.
#ifndef EXPERTD_CLIENT_BENCH_BENCH_SESSION_H_
#define EXPERTD_CLIENT_BENCH_BENCH_SESSION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "client/bench/load_driver.h"
#include "client/bench/options.h"
#include "client/bench/run_config.h"
#include "client/bench/summary.h"
#include "client/bench/workload.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/expertd.grpc.pb.h"

namespace expertd::bench {

struct PointResult {
  RunConfig config;
  BenchSummary summary;
  nlohmann::ordered_json json;  // the result JSON without per-request arrays
};

class BenchSession {
 public:
  static absl::StatusOr<std::unique_ptr<BenchSession>> Connect(const BenchOptions& options);

  // Runs `load` and writes <base>.json and <base>.csv; the table goes to stdout.
  absl::StatusOr<PointResult> RunPoint(const LoadOptions& load, const std::string& base);

  void Interrupt();
  bool interrupted() const;
  const v1::ModelInfo& model() const { return model_; }

 private:
  explicit BenchSession(const BenchOptions& options) : options_(options) {}
  WorkloadOptions MakeWorkloadOptions() const;
  RunConfig MakeRunConfig(const LoadOptions& load) const;

  const BenchOptions options_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  v1::ModelInfo model_;
  std::string server_version_;
  std::vector<Prompt> dataset_;
  LengthDistribution input_len_, output_len_;
  std::vector<double> percentiles_;
  std::string admin_token_;

  mutable absl::Mutex mu_;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  LoadDriver* driver_ ABSL_GUARDED_BY(mu_) = nullptr;  // the point in progress
};

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_BENCH_SESSION_H_
