// ServingMetrics: every Prometheus metric the daemon exports, in one place,
// named like vLLM's (`vllm:` -> `expertd:`) so vLLM dashboards, KEDA/HPA rules
// and the Gateway API inference extension need only a prefix change. The full
// name mapping is in docs/operations.md ("## Metrics").
//
// Who calls what:
//   scheduler, once per engine step:   OnStep(), UpdateScheduler()
//   scheduler, per request:            OnFirstToken(), OnInterTokenLatency(),
//                                      OnRequestFinished(), OnPreemption()
//   gRPC service, per finished RPC:    OnRpcFinished()
//   engine owner, any time or in a collect hook (runs on every scrape):
//                                      UpdateExpertCache()
//   checkpoint activation, per call:   OnCheckpointActivation()
// Every method is thread-safe, cheap (atomics; no allocation after the first
// use of a label value) and never blocks on a scrape for long.
//
// All times are durations measured with one monotonic clock in this process
// (absl::Now() differences are fine). Every series carries the constant label
// model_name (as vLLM). The daemon owns one instance: Daemon::metrics().
#ifndef EXPERTD_SERVER_METRICS_SERVING_METRICS_H_
#define EXPERTD_SERVER_METRICS_SERVING_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics/registry.h"

namespace expertd::server {

// Why a request left the engine; the `finished_reason` label of
// expertd:request_success_total uses vLLM's values:
//   kStop   "stop"    a stop string / stop token id matched, or EOS
//   kLength "length"  max_new_tokens reached or the context is full
//   kAbort  "abort"   cancelled: client cancel, deadline, drain, preempted away
//   kError  "error"   the engine failed for this request
enum class FinishedReason { kStop, kLength, kAbort, kError };

// One request that has left the engine (any reason).
struct FinishedRequest {
  FinishedReason reason = FinishedReason::kStop;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t max_tokens = 0;       // the request's max_new_tokens; 0 = not set (not observed)
  absl::Duration queue_time;    // arrival -> first scheduled in an engine step
  absl::Duration prefill_time;  // first scheduled -> first generated token
  absl::Duration decode_time;   // first generated token -> last generated token
  absl::Duration e2e_time;      // arrival -> finished
};

// The scheduler's state after a step (gauges).
struct SchedulerSnapshot {
  int64_t num_running = 0;    // sequences in the running batch
  int64_t num_waiting = 0;    // admitted requests waiting for a batch slot
  double kv_cache_usage = 0;  // fraction of KV-cache blocks in use, 0..1
};

// Expert-cache counters of one MoE layer, cumulative since the engine started
// (the same quantities as expertd.v1.ExpertCounters).
struct ExpertLayerCounters {
  int layer = 0;
  uint64_t hits = 0;    // expert already on the device
  uint64_t misses = 0;  // fetched on demand
  uint64_t prefetch_issued = 0;
  uint64_t prefetch_used = 0;    // prefetched, then used
  uint64_t prefetch_wasted = 0;  // prefetched, evicted unused
  uint64_t bytes_host_to_device = 0;
  uint64_t bytes_disk_to_host = 0;
  double stall_seconds = 0;       // compute waiting for this layer's experts
  int64_t experts_on_device = 0;  // current (gauge)
  uint64_t host_computes = 0;     // missed experts computed on the host (--expert_compute)
};

struct ExpertCacheSnapshot {
  // How the experts are stored, so paged and held ("bf16", "int4-g32-f16",
  // "fp8-block-g128x128-f32", ...): every byte count here is of this format.
  // Labels expertd:expert_bytes_moved_total{format}; empty reads "unknown".
  std::string format;
  std::vector<ExpertLayerCounters> layers;
  uint64_t device_capacity_bytes = 0;
  uint64_t device_used_bytes = 0;
  uint64_t host_capacity_bytes = 0;  // 0 = unlimited host tier
  uint64_t host_used_bytes = 0;
};

// Static facts exported as info gauges (value 1, facts in labels).
struct ServingMetricsInfo {
  std::string model_name;
  std::string version;
  // expertd:cache_config_info labels, e.g. {"kv_cache_bytes", "268435456"}.
  std::map<std::string, std::string> cache_config;
};

class ServingMetrics {
 public:
  explicit ServingMetrics(const ServingMetricsInfo& info);
  ServingMetrics(const ServingMetrics&) = delete;
  ServingMetrics& operator=(const ServingMetrics&) = delete;

  // --- scheduler, once per engine step ---
  // Tokens computed in this step: prefill (prompt) tokens, chunked prefill
  // counting each chunk, and sampled (generated) tokens. Feeds
  // prompt_tokens_total, generation_tokens_total, iteration_tokens_total.
  void OnStep(int64_t prompt_tokens, int64_t generation_tokens);
  void UpdateScheduler(const SchedulerSnapshot& snapshot);

  // --- scheduler, per request ---
  // The request's first token: arrival -> first token (includes queueing).
  void OnFirstToken(absl::Duration time_to_first_token);
  // Time since the request's previous token, observed `tokens` times (when a
  // step emits several tokens for one request, pass the step interval
  // divided by the count and the count).
  void OnInterTokenLatency(absl::Duration latency, int64_t tokens = 1);
  // Exactly once per request that entered the engine, whatever the reason.
  void OnRequestFinished(const FinishedRequest& request);
  // A running sequence was evicted to free KV blocks and will be recomputed.
  void OnPreemption();

  // --- gRPC layer, per finished call ---
  // Every InferenceService call, including ones rejected before the engine
  // (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE, ...). `rpc` is the
  // method name ("Generate", "GenerateUnary", "Tokenize", ...). From a
  // grpc::Status: static_cast<absl::StatusCode>(status.error_code()) (the
  // numbering is the same).
  void OnRpcFinished(absl::string_view rpc, absl::StatusCode code);

  // --- engine owner ---
  // Takes cumulative counters; the exported counters advance by the
  // difference from the previous snapshot. A layer whose value went down
  // (the engine restarted counting, e.g. after a checkpoint activation) adds
  // its whole new value, so exported counters never decrease.
  void UpdateExpertCache(const ExpertCacheSnapshot& snapshot);

  // --- checkpoint activation (AdminService.ActivateCheckpoint) ---
  // Counts the attempt in expertd:checkpoint_activations_total{result="ok"|
  // "error"}; on success expertd:active_model_info{served_model_name,
  // checkpoint_id} becomes 1 for the new model and 0 for the one it replaced
  // (the constant model_name label stays the name the daemon started with).
  void OnCheckpointActivation(bool ok, const std::string& served_model_name = "",
                              const std::string& checkpoint_id = "");

  // Runs on every scrape, before rendering: the place to pull snapshots
  // (UpdateScheduler / UpdateExpertCache) from objects that keep their own.
  void AddCollectHook(std::function<void()> hook) { registry_.AddCollectHook(std::move(hook)); }

  // The exposition text (what GET /metrics returns) and the registry behind it.
  std::string Render() const { return registry_.Render(); }
  const metrics::Registry& registry() const { return registry_; }

 private:
  using Counter = metrics::Counter;
  using Gauge = metrics::Gauge;
  using Histogram = metrics::Histogram;

  metrics::Registry registry_;

  // Scheduler state.
  Gauge* num_requests_running_;
  Gauge* num_requests_waiting_;
  Gauge* kv_cache_usage_perc_;
  // Tokens and steps.
  Counter* prompt_tokens_total_;
  Counter* generation_tokens_total_;
  Histogram* iteration_tokens_;
  Counter* num_preemptions_total_;
  // Requests.
  metrics::Family<Counter>* request_success_total_;  // {finished_reason}
  metrics::Family<Counter>* requests_total_;         // {rpc, code}
  Histogram* time_to_first_token_;
  Histogram* inter_token_latency_;
  Histogram* request_time_per_output_token_;
  Histogram* e2e_request_latency_;
  Histogram* request_queue_time_;
  Histogram* request_prefill_time_;
  Histogram* request_decode_time_;
  Histogram* request_inference_time_;
  Histogram* request_prompt_tokens_;
  Histogram* request_generation_tokens_;
  Histogram* request_params_max_tokens_;
  // Expert cache.
  metrics::Family<Counter>* expert_cache_hits_total_;       // {layer}
  metrics::Family<Counter>* expert_cache_misses_total_;     // {layer}
  metrics::Family<Counter>* expert_prefetch_issued_total_;  // {layer}
  metrics::Family<Counter>* expert_prefetch_used_total_;    // {layer}
  metrics::Family<Counter>* expert_prefetch_wasted_total_;  // {layer}
  metrics::Family<Counter>* expert_stall_seconds_total_;    // {layer}
  metrics::Family<Counter>* expert_host_computes_total_;    // {layer}
  metrics::Family<Counter>* expert_bytes_moved_total_;      // {path, format}
  metrics::Family<Gauge>* experts_on_device_;               // {layer}
  metrics::Family<Gauge>* expert_cache_used_bytes_;         // {tier}
  metrics::Family<Gauge>* expert_cache_capacity_bytes_;     // {tier}

  // Checkpoint activation.
  metrics::Family<Counter>* checkpoint_activations_total_;  // {result}
  metrics::Family<Gauge>* active_model_info_;               // {served_model_name, checkpoint_id}
  absl::Mutex active_mu_;                                   // serialises OnCheckpointActivation
  Gauge* active_model_ ABSL_GUARDED_BY(active_mu_) = nullptr;

  absl::Mutex expert_mu_;  // serialises UpdateExpertCache
  std::map<int, ExpertLayerCounters> last_expert_ ABSL_GUARDED_BY(expert_mu_);
};

// The vLLM-style label value for `reason` ("stop", "length", "abort", "error").
const char* FinishedReasonLabel(FinishedReason reason);

}  // namespace expertd::server

#endif  // EXPERTD_SERVER_METRICS_SERVING_METRICS_H_
