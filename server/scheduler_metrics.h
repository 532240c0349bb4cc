// SchedulerMetrics: feeds the scheduler's events into the daemon's
// Prometheus metrics (ServingMetrics). Pure translation, no state.
#ifndef EXPERTD_SERVER_SCHEDULER_METRICS_H_
#define EXPERTD_SERVER_SCHEDULER_METRICS_H_

#include "server/metrics/serving_metrics.h"
#include "server/scheduler.h"

namespace expertd::server {

class SchedulerMetrics final : public SchedulerListener {
 public:
  explicit SchedulerMetrics(ServingMetrics* metrics) : metrics_(metrics) {}

  void OnStep(const SchedulerStats& stats, int64_t prompt_tokens,
              int64_t generated_tokens) override;
  void OnFirstToken(absl::Duration time_to_first_token) override;
  void OnInterTokenLatency(absl::Duration latency) override;
  void OnRequestFinished(const FinishedRequestInfo& info) override;

 private:
  ServingMetrics* const metrics_;  // not owned
};

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_SCHEDULER_METRICS_H_
