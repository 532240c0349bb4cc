// A reader for Prometheus' text exposition format 0.0.4, enough to diff the
// daemon's counters: sample lines `name{label="value",...} value [timestamp]`;
// comments (# HELP / # TYPE) and blank lines are skipped. Label values may
// hold escaped \" \\ \n.
#ifndef EXPERTD_CLIENT_BENCH_PROMETHEUS_TEXT_H_
#define EXPERTD_CLIENT_BENCH_PROMETHEUS_TEXT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace expertd::bench {

struct PrometheusSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Errors name the offending line.
absl::StatusOr<std::vector<PrometheusSample>> ParsePrometheusText(const std::string& text);

// Sum of every sample named `name` whose labels include all of `match`
// (e.g. {{"path", "host_to_device"}}); 0 when there is none.
double SumSamples(const std::vector<PrometheusSample>& samples, const std::string& name,
                  const std::map<std::string, std::string>& match = {});

}  // namespace expertd::bench

#endif  // EXPERTD_CLIENT_BENCH_PROMETHEUS_TEXT_H_
