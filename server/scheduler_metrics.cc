#include "server/scheduler_metrics.h"

namespace expertd::server {
namespace {

FinishedReason ToMetricsReason(const FinishedRequestInfo& info) {
  if (info.code != absl::StatusCode::kOk) return FinishedReason::kAbort;
  switch (info.finish_reason) {
    case FinishReason::kStop:
    case FinishReason::kEos:
      return FinishedReason::kStop;
    case FinishReason::kLength:
      return FinishedReason::kLength;
    case FinishReason::kError:
      return FinishedReason::kError;
    case FinishReason::kCancelled:
    case FinishReason::kNone:
      return FinishedReason::kAbort;
  }
  return FinishedReason::kAbort;
}

}  // namespace

void SchedulerMetrics::OnStep(const SchedulerStats& stats, int64_t prompt_tokens,
                              int64_t generated_tokens) {
  metrics_->OnStep(prompt_tokens, generated_tokens);
  metrics_->UpdateScheduler({stats.running, stats.waiting, stats.kv_cache_usage});
}

void SchedulerMetrics::OnFirstToken(absl::Duration ttft) { metrics_->OnFirstToken(ttft); }

void SchedulerMetrics::OnInterTokenLatency(absl::Duration latency) {
  metrics_->OnInterTokenLatency(latency);
}

void SchedulerMetrics::OnRequestFinished(const FinishedRequestInfo& info) {
  FinishedRequest r;
  r.reason = ToMetricsReason(info);
  r.prompt_tokens = info.prompt_tokens;
  r.generation_tokens = info.completion_tokens;
  r.max_tokens = info.max_new_tokens;
  r.queue_time = info.timing.queue_time;
  r.prefill_time = info.prefill_time;
  r.decode_time = info.timing.decode_time;
  r.e2e_time = info.timing.total_time;
  metrics_->OnRequestFinished(r);
}

}  // namespace expertd::server
