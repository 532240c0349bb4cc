#include "server/metrics/serving_metrics.h"

#include <string>

namespace expertd::server {
namespace {

using metrics::Label;

// Bucket bounds as vLLM's (vllm/v1/metrics/loggers.py), so the same
// histogram_quantile() queries and heatmaps work.
const std::vector<double>& TtftBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                        0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                        20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
  return b;
}

const std::vector<double>& TokenLatencyBuckets() {
  static const std::vector<double> b = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                        0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return b;
}

const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> b = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                        5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}

// vLLM uses 1-2-5 up to max_model_len; the daemon registers metrics before
// the model is loaded, so the range covers any context up to 1M tokens.
const std::vector<double>& TokenCountBuckets() {
  static const std::vector<double> b = metrics::OneTwoFiveBuckets(1 << 20);
  return b;
}

const std::vector<double>& IterationTokenBuckets() {
  static const std::vector<double> b = {1,   8,    16,   32,   64,   128,  256,
                                        512, 1024, 2048, 4096, 8192, 16384};
  return b;
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Advances `counter` from the previous cumulative value to the current one;
// a decrease means the source restarted counting from zero.
void Advance(metrics::Counter* counter, double previous, double current) {
  counter->Increment(current >= previous ? current - previous : current);
}

std::vector<Label> ConstLabels(const ServingMetricsInfo& info) {
  return {{"model_name", info.model_name}};
}

}  // namespace

const char* FinishedReasonLabel(FinishedReason reason) {
  switch (reason) {
    case FinishedReason::kStop:
      return "stop";
    case FinishedReason::kLength:
      return "length";
    case FinishedReason::kAbort:
      return "abort";
    case FinishedReason::kError:
      return "error";
  }
  return "error";
}

ServingMetrics::ServingMetrics(const ServingMetricsInfo& info) : registry_(ConstLabels(info)) {
  metrics::Registry& r = registry_;
  // Info gauges (value 1; the facts are labels).
  r.AddGauge("expertd:build_info", "expertd version (value 1; the version is a label).",
             {"version"})
      ->WithLabels({info.version})
      ->Set(1);
  {
    std::vector<std::string> names, values;
    for (const auto& [k, v] : info.cache_config) {
      names.push_back(k);
      values.push_back(v);
    }
    r.AddGauge("expertd:cache_config_info",
               "KV-cache and expert-cache configuration (value 1; settings are labels).", names)
        ->WithLabels(values)
        ->Set(1);
  }

  checkpoint_activations_total_ = r.AddCounter(
      "expertd:checkpoint_activations_total",
      "Checkpoint activations attempted (past request validation), by result (ok, error).",
      {"result"});
  checkpoint_activations_total_->WithLabels({"ok"});
  checkpoint_activations_total_->WithLabels({"error"});
  active_model_info_ = r.AddGauge(
      "expertd:active_model_info",
      "The served model (value 1; name and checkpoint are labels; 0 for models served before).",
      {"served_model_name", "checkpoint_id"});
  active_model_ = active_model_info_->WithLabels({info.model_name, "base"});
  active_model_->Set(1);

  // Scheduler state.
  num_requests_running_ = r.AddGauge("expertd:num_requests_running",
                                     "Requests in the running batch (being prefilled or decoded).")
                              ->Get();
  num_requests_waiting_ = r.AddGauge("expertd:num_requests_waiting",
                                     "Admitted requests waiting for a slot in the running batch.")
                              ->Get();
  kv_cache_usage_perc_ =
      r.AddGauge("expertd:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1).")
          ->Get();

  // Tokens and steps.
  prompt_tokens_total_ =
      r.AddCounter("expertd:prompt_tokens_total",
                   "Prompt tokens computed (prefill), counted as they are processed.")
          ->Get();
  generation_tokens_total_ = r.AddCounter("expertd:generation_tokens_total",
                                          "Tokens generated, counted as they are sampled.")
                                 ->Get();
  iteration_tokens_ = r.AddHistogram("expertd:iteration_tokens_total",
                                     "Tokens (prefill and decode) computed per engine step.",
                                     IterationTokenBuckets())
                          ->Get();
  num_preemptions_total_ =
      r.AddCounter("expertd:num_preemptions_total",
                   "Running sequences evicted to free KV-cache blocks (recomputed later).")
          ->Get();

  // Requests.
  request_success_total_ = r.AddCounter(
      "expertd:request_success_total",
      "Requests that left the engine, by why they finished (stop, length, abort, error).",
      {"finished_reason"});
  for (FinishedReason reason : {FinishedReason::kStop, FinishedReason::kLength,
                                FinishedReason::kAbort, FinishedReason::kError}) {
    request_success_total_->WithLabels(
        {FinishedReasonLabel(reason)});  // every series exists from the start
  }
  requests_total_ =
      r.AddCounter("expertd:requests_total",
                   "InferenceService calls by method and final gRPC status code.", {"rpc", "code"});
  time_to_first_token_ =
      r.AddHistogram("expertd:time_to_first_token_seconds",
                     "Request arrival to its first generated token, in seconds.", TtftBuckets())
          ->Get();
  inter_token_latency_ = r.AddHistogram("expertd:inter_token_latency_seconds",
                                        "Time between consecutive generated tokens of a request, "
                                        "in seconds (one sample per token).",
                                        TokenLatencyBuckets())
                             ->Get();
  request_time_per_output_token_ =
      r.AddHistogram("expertd:request_time_per_output_token_seconds",
                     "Per request: decode time divided by (generated tokens - 1), in seconds.",
                     TokenLatencyBuckets())
          ->Get();
  e2e_request_latency_ =
      r.AddHistogram("expertd:e2e_request_latency_seconds",
                     "Request arrival to completion, in seconds.", RequestLatencyBuckets())
          ->Get();
  request_queue_time_ = r.AddHistogram("expertd:request_queue_time_seconds",
                                       "Request arrival to its first engine step, in seconds.",
                                       RequestLatencyBuckets())
                            ->Get();
  request_prefill_time_ = r.AddHistogram("expertd:request_prefill_time_seconds",
                                         "First engine step to first generated token, in seconds.",
                                         RequestLatencyBuckets())
                              ->Get();
  request_decode_time_ =
      r.AddHistogram("expertd:request_decode_time_seconds",
                     "First to last generated token, in seconds.", RequestLatencyBuckets())
          ->Get();
  request_inference_time_ =
      r.AddHistogram("expertd:request_inference_time_seconds",
                     "Prefill plus decode time of a request, in seconds.", RequestLatencyBuckets())
          ->Get();
  request_prompt_tokens_ =
      r.AddHistogram("expertd:request_prompt_tokens",
                     "Prompt length of each finished request, in tokens.", TokenCountBuckets())
          ->Get();
  request_generation_tokens_ =
      r.AddHistogram("expertd:request_generation_tokens",
                     "Tokens generated by each finished request.", TokenCountBuckets())
          ->Get();
  request_params_max_tokens_ =
      r.AddHistogram("expertd:request_params_max_tokens",
                     "The max_new_tokens each request asked for (when set).", TokenCountBuckets())
          ->Get();

  // Expert cache (expertd's own; no vLLM counterpart).
  expert_cache_hits_total_ =
      r.AddCounter("expertd:expert_cache_hits_total",
                   "Routed experts found in the device cache, per MoE layer.", {"layer"});
  expert_cache_misses_total_ = r.AddCounter(
      "expertd:expert_cache_misses_total",
      "Routed experts fetched on demand (not on the device), per MoE layer.", {"layer"});
  expert_prefetch_issued_total_ =
      r.AddCounter("expertd:expert_prefetch_issued_total",
                   "Expert prefetches started, per MoE layer.", {"layer"});
  expert_prefetch_used_total_ =
      r.AddCounter("expertd:expert_prefetch_used_total",
                   "Prefetched experts that were then used, per MoE layer.", {"layer"});
  expert_prefetch_wasted_total_ =
      r.AddCounter("expertd:expert_prefetch_wasted_total",
                   "Prefetched experts evicted before use, per MoE layer.", {"layer"});
  expert_stall_seconds_total_ =
      r.AddCounter("expertd:expert_stall_seconds_total",
                   "Seconds compute waited for experts to arrive, per MoE layer.", {"layer"});
  expert_host_computes_total_ = r.AddCounter(
      "expertd:expert_host_computes_total",
      "Routed experts not on the device computed on the host instead of paged "
      "(--expert_compute), per MoE layer.",
      {"layer"});
  expert_bytes_moved_total_ = r.AddCounter(
      "expertd:expert_bytes_moved_total",
      "Expert weight bytes copied between memory tiers, in the format the experts are stored in.",
      {"path", "format"});
  experts_on_device_ = r.AddGauge("expertd:experts_on_device",
                                  "Experts resident in device memory, per MoE layer.", {"layer"});
  expert_cache_used_bytes_ = r.AddGauge("expertd:expert_cache_used_bytes",
                                        "Bytes of expert weights held, per tier.", {"tier"});
  expert_cache_capacity_bytes_ =
      r.AddGauge("expertd:expert_cache_capacity_bytes",
                 "Expert-cache budget in bytes, per tier (0: unlimited).", {"tier"});
}

void ServingMetrics::OnStep(int64_t prompt_tokens, int64_t generation_tokens) {
  if (prompt_tokens > 0) prompt_tokens_total_->Increment(static_cast<double>(prompt_tokens));
  if (generation_tokens > 0)
    generation_tokens_total_->Increment(static_cast<double>(generation_tokens));
  const int64_t total = prompt_tokens + generation_tokens;
  if (total > 0) iteration_tokens_->Observe(static_cast<double>(total));
}

void ServingMetrics::UpdateScheduler(const SchedulerSnapshot& s) {
  num_requests_running_->Set(static_cast<double>(s.num_running));
  num_requests_waiting_->Set(static_cast<double>(s.num_waiting));
  kv_cache_usage_perc_->Set(s.kv_cache_usage);
}

void ServingMetrics::OnFirstToken(absl::Duration ttft) {
  time_to_first_token_->Observe(Seconds(ttft));
}

void ServingMetrics::OnInterTokenLatency(absl::Duration latency, int64_t tokens) {
  if (tokens > 0) inter_token_latency_->Observe(Seconds(latency), static_cast<uint64_t>(tokens));
}

void ServingMetrics::OnRequestFinished(const FinishedRequest& r) {
  request_success_total_->WithLabels({FinishedReasonLabel(r.reason)})->Increment();
  e2e_request_latency_->Observe(Seconds(r.e2e_time));
  request_queue_time_->Observe(Seconds(r.queue_time));
  request_prefill_time_->Observe(Seconds(r.prefill_time));
  request_decode_time_->Observe(Seconds(r.decode_time));
  request_inference_time_->Observe(Seconds(r.prefill_time + r.decode_time));
  request_prompt_tokens_->Observe(static_cast<double>(r.prompt_tokens));
  request_generation_tokens_->Observe(static_cast<double>(r.generation_tokens));
  if (r.max_tokens > 0) request_params_max_tokens_->Observe(static_cast<double>(r.max_tokens));
  // Mean time per output token after the first (as vLLM: decode / (n - 1)).
  if (r.generation_tokens > 1) {
    request_time_per_output_token_->Observe(Seconds(r.decode_time) /
                                            static_cast<double>(r.generation_tokens - 1));
  }
}

void ServingMetrics::OnPreemption() { num_preemptions_total_->Increment(); }

void ServingMetrics::OnCheckpointActivation(bool ok, const std::string& served_model_name,
                                            const std::string& checkpoint_id) {
  checkpoint_activations_total_->WithLabels({ok ? "ok" : "error"})->Increment();
  if (!ok) return;
  absl::MutexLock lock(&active_mu_);
  Gauge* next = active_model_info_->WithLabels({served_model_name, checkpoint_id});
  if (active_model_ != nullptr && active_model_ != next) active_model_->Set(0);
  next->Set(1);
  active_model_ = next;
}

void ServingMetrics::OnRpcFinished(absl::string_view rpc, absl::StatusCode code) {
  requests_total_->WithLabels({std::string(rpc), absl::StatusCodeToString(code)})->Increment();
}

void ServingMetrics::UpdateExpertCache(const ExpertCacheSnapshot& s) {
  absl::MutexLock lock(&expert_mu_);
  double h2d_delta = 0, d2h_delta = 0;
  for (const ExpertLayerCounters& now : s.layers) {
    const ExpertLayerCounters before = last_expert_[now.layer];  // zeros the first time
    const std::vector<std::string> layer = {std::to_string(now.layer)};
    Advance(expert_cache_hits_total_->WithLabels(layer), before.hits, now.hits);
    Advance(expert_cache_misses_total_->WithLabels(layer), before.misses, now.misses);
    Advance(expert_prefetch_issued_total_->WithLabels(layer), before.prefetch_issued,
            now.prefetch_issued);
    Advance(expert_prefetch_used_total_->WithLabels(layer), before.prefetch_used,
            now.prefetch_used);
    Advance(expert_prefetch_wasted_total_->WithLabels(layer), before.prefetch_wasted,
            now.prefetch_wasted);
    Advance(expert_stall_seconds_total_->WithLabels(layer), before.stall_seconds,
            now.stall_seconds);
    Advance(expert_host_computes_total_->WithLabels(layer), before.host_computes,
            now.host_computes);
    experts_on_device_->WithLabels(layer)->Set(static_cast<double>(now.experts_on_device));
    auto delta = [](double prev, double cur) { return cur >= prev ? cur - prev : cur; };
    h2d_delta += delta(before.bytes_host_to_device, now.bytes_host_to_device);
    d2h_delta += delta(before.bytes_disk_to_host, now.bytes_disk_to_host);
    last_expert_[now.layer] = now;
  }
  // Both paths exist (at 0) from the first snapshot of a format on.
  const std::string format = s.format.empty() ? "unknown" : s.format;
  expert_bytes_moved_total_->WithLabels({"host_to_device", format})->Increment(h2d_delta);
  expert_bytes_moved_total_->WithLabels({"disk_to_host", format})->Increment(d2h_delta);
  expert_cache_used_bytes_->WithLabels({"device"})->Set(static_cast<double>(s.device_used_bytes));
  expert_cache_used_bytes_->WithLabels({"host"})->Set(static_cast<double>(s.host_used_bytes));
  expert_cache_capacity_bytes_->WithLabels({"device"})
      ->Set(static_cast<double>(s.device_capacity_bytes));
  expert_cache_capacity_bytes_->WithLabels({"host"})->Set(
      static_cast<double>(s.host_capacity_bytes));
}

}  // namespace expertd::server
