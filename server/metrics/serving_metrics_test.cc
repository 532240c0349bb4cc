#include "server/metrics/serving_metrics.h"

#include "gtest/gtest.h"

namespace expertd::server {
namespace {

ServingMetricsInfo Info() {
  ServingMetricsInfo info;
  info.model_name = "tiny";
  info.version = "1.2.3";
  info.cache_config = {{"kv_cache_bytes", "1048576"}, {"expert_policy", "lru"}};
  return info;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ServingMetricsTest, ExportsEveryFamilyWithVllmStyleNames) {
  ServingMetrics m(Info());
  const std::string text = m.Render();
  for (const char* family : {"expertd:num_requests_running gauge",
                             "expertd:num_requests_waiting gauge",
                             "expertd:kv_cache_usage_perc gauge",
                             "expertd:prompt_tokens_total counter",
                             "expertd:generation_tokens_total counter",
                             "expertd:request_success_total counter",
                             "expertd:requests_total counter",
                             "expertd:num_preemptions_total counter",
                             "expertd:iteration_tokens_total histogram",
                             "expertd:time_to_first_token_seconds histogram",
                             "expertd:inter_token_latency_seconds histogram",
                             "expertd:request_time_per_output_token_seconds histogram",
                             "expertd:e2e_request_latency_seconds histogram",
                             "expertd:request_queue_time_seconds histogram",
                             "expertd:request_prefill_time_seconds histogram",
                             "expertd:request_decode_time_seconds histogram",
                             "expertd:request_inference_time_seconds histogram",
                             "expertd:request_prompt_tokens histogram",
                             "expertd:request_generation_tokens histogram",
                             "expertd:request_params_max_tokens histogram",
                             "expertd:expert_cache_hits_total counter",
                             "expertd:expert_cache_misses_total counter",
                             "expertd:expert_prefetch_issued_total counter",
                             "expertd:expert_prefetch_used_total counter",
                             "expertd:expert_prefetch_wasted_total counter",
                             "expertd:expert_stall_seconds_total counter",
                             "expertd:expert_host_computes_total counter",
                             "expertd:expert_bytes_moved_total counter",
                             "expertd:experts_on_device gauge",
                             "expertd:expert_cache_used_bytes gauge",
                             "expertd:expert_cache_capacity_bytes gauge",
                             "expertd:build_info gauge",
                             "expertd:cache_config_info gauge"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + "\n"), std::string::npos) << family;
  }
  EXPECT_TRUE(Has(text, "expertd:build_info{model_name=\"tiny\",version=\"1.2.3\"} 1")) << text;
  EXPECT_TRUE(Has(text,
                  "expertd:cache_config_info{model_name=\"tiny\",expert_policy=\"lru\","
                  "kv_cache_bytes=\"1048576\"} 1"))
      << text;
  // Every finished_reason series exists before the first request (rate() works from the start).
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    EXPECT_TRUE(Has(
        text, std::string("expertd:request_success_total{model_name=\"tiny\",finished_reason=\"") +
                  reason + "\"} 0"))
        << reason;
  }
  EXPECT_TRUE(Has(text, "expertd:num_requests_waiting{model_name=\"tiny\"} 0"));
}

TEST(ServingMetricsTest, StepsAndSchedulerState) {
  ServingMetrics m(Info());
  m.OnStep(100, 4);
  m.OnStep(0, 5);
  m.OnStep(0, 0);  // an idle step observes nothing
  m.UpdateScheduler({/*num_running=*/5, /*num_waiting=*/2, /*kv_cache_usage=*/0.25});
  const std::string text = m.Render();
  EXPECT_TRUE(Has(text, "expertd:prompt_tokens_total{model_name=\"tiny\"} 100"));
  EXPECT_TRUE(Has(text, "expertd:generation_tokens_total{model_name=\"tiny\"} 9"));
  EXPECT_TRUE(Has(text, "expertd:iteration_tokens_total_count{model_name=\"tiny\"} 2"));
  EXPECT_TRUE(Has(text, "expertd:iteration_tokens_total_sum{model_name=\"tiny\"} 109"));
  EXPECT_TRUE(Has(text, "expertd:iteration_tokens_total_bucket{model_name=\"tiny\",le=\"8\"} 1"));
  EXPECT_TRUE(Has(text, "expertd:num_requests_running{model_name=\"tiny\"} 5"));
  EXPECT_TRUE(Has(text, "expertd:num_requests_waiting{model_name=\"tiny\"} 2"));
  EXPECT_TRUE(Has(text, "expertd:kv_cache_usage_perc{model_name=\"tiny\"} 0.25"));
}

TEST(ServingMetricsTest, FinishedRequestFeedsTheRequestHistograms) {
  ServingMetrics m(Info());
  FinishedRequest r;
  r.reason = FinishedReason::kLength;
  r.prompt_tokens = 12;
  r.generation_tokens = 5;
  r.max_tokens = 5;
  r.queue_time = absl::Milliseconds(250);
  r.prefill_time = absl::Milliseconds(500);
  r.decode_time = absl::Seconds(2);
  r.e2e_time = absl::Milliseconds(2750);
  m.OnRequestFinished(r);
  m.OnFirstToken(absl::Milliseconds(750));
  m.OnInterTokenLatency(absl::Milliseconds(500), 4);
  FinishedRequest aborted;
  aborted.reason = FinishedReason::kAbort;
  m.OnRequestFinished(aborted);
  m.OnPreemption();

  const std::string t = m.Render();
  const std::string L = "{model_name=\"tiny\"}";
  EXPECT_TRUE(
      Has(t, "expertd:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1"));
  EXPECT_TRUE(
      Has(t, "expertd:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"} 1"));
  EXPECT_TRUE(
      Has(t, "expertd:request_success_total{model_name=\"tiny\",finished_reason=\"stop\"} 0"));
  EXPECT_TRUE(Has(t, "expertd:e2e_request_latency_seconds_sum" + L + " 2.75"));
  EXPECT_TRUE(Has(t, "expertd:e2e_request_latency_seconds_count" + L + " 2"));
  EXPECT_TRUE(Has(t, "expertd:request_queue_time_seconds_sum" + L + " 0.25"));
  EXPECT_TRUE(Has(t, "expertd:request_prefill_time_seconds_sum" + L + " 0.5"));
  EXPECT_TRUE(Has(t, "expertd:request_decode_time_seconds_sum" + L + " 2"));
  EXPECT_TRUE(Has(t, "expertd:request_inference_time_seconds_sum" + L + " 2.5"));
  EXPECT_TRUE(Has(t, "expertd:request_prompt_tokens_sum" + L + " 12"));
  EXPECT_TRUE(Has(t, "expertd:request_generation_tokens_sum" + L + " 5"));
  EXPECT_TRUE(Has(t, "expertd:request_generation_tokens_bucket{model_name=\"tiny\",le=\"5\"} 2"));
  // max_tokens unset on the aborted request: observed once only.
  EXPECT_TRUE(Has(t, "expertd:request_params_max_tokens_count" + L + " 1"));
  // TPOT = decode / (generated - 1) = 2 s / 4; the aborted request had < 2 tokens.
  EXPECT_TRUE(Has(t, "expertd:request_time_per_output_token_seconds_sum" + L + " 0.5"));
  EXPECT_TRUE(Has(t, "expertd:request_time_per_output_token_seconds_count" + L + " 1"));
  EXPECT_TRUE(Has(t, "expertd:time_to_first_token_seconds_sum" + L + " 0.75"));
  EXPECT_TRUE(Has(t, "expertd:inter_token_latency_seconds_count" + L + " 4"));
  EXPECT_TRUE(Has(t, "expertd:inter_token_latency_seconds_sum" + L + " 2"));
  EXPECT_TRUE(
      Has(t, "expertd:inter_token_latency_seconds_bucket{model_name=\"tiny\",le=\"0.4\"} 0"));
  EXPECT_TRUE(
      Has(t, "expertd:inter_token_latency_seconds_bucket{model_name=\"tiny\",le=\"0.5\"} 4"));
  EXPECT_TRUE(Has(t, "expertd:num_preemptions_total" + L + " 1"));
}

TEST(ServingMetricsTest, RpcOutcomesByCode) {
  ServingMetrics m(Info());
  m.OnRpcFinished("Generate", absl::StatusCode::kOk);
  m.OnRpcFinished("Generate", absl::StatusCode::kOk);
  m.OnRpcFinished("Generate", absl::StatusCode::kResourceExhausted);
  m.OnRpcFinished("GenerateUnary", absl::StatusCode::kInvalidArgument);
  const std::string t = m.Render();
  EXPECT_TRUE(Has(t, "expertd:requests_total{model_name=\"tiny\",rpc=\"Generate\",code=\"OK\"} 2"));
  EXPECT_TRUE(Has(t,
                  "expertd:requests_total{model_name=\"tiny\",rpc=\"Generate\",code=\"RESOURCE_"
                  "EXHAUSTED\"} 1"));
  EXPECT_TRUE(Has(t,
                  "expertd:requests_total{model_name=\"tiny\",rpc=\"GenerateUnary\",code=\"INVALID_"
                  "ARGUMENT\"} 1"));
}

TEST(ServingMetricsTest, ExpertCacheSnapshotsAdvanceCountersByDifference) {
  ServingMetrics m(Info());
  ExpertCacheSnapshot s;
  s.layers.resize(2);
  s.layers[0] = {/*layer=*/1,  /*hits=*/10,  /*misses=*/3,  /*issued=*/4,
                 /*used=*/2,   /*wasted=*/1,
                 /*h2d=*/1000, /*d2h=*/500,  /*stall=*/0.5, /*on_device=*/6};
  s.layers[1] = {/*layer=*/3, /*hits=*/5, /*misses=*/1, 0, 0,
                 0,           /*h2d=*/24, /*d2h=*/0,    0, 2};
  s.device_capacity_bytes = 4096;
  s.device_used_bytes = 2048;
  s.format = "int4-g32-f16";
  m.UpdateExpertCache(s);
  m.UpdateExpertCache(s);  // same totals again: nothing moves
  s.layers[0].hits = 15;
  s.layers[0].bytes_host_to_device = 1500;
  s.layers[0].stall_seconds = 0.75;
  s.layers[0].host_computes = 9;
  m.UpdateExpertCache(s);
  // Layer 3 restarts counting (e.g. a new checkpoint): its new value is added.
  s.layers[1].hits = 2;
  s.layers[1].misses = 0;
  m.UpdateExpertCache(s);

  const std::string t = m.Render();
  EXPECT_TRUE(Has(t, "expertd:expert_cache_hits_total{model_name=\"tiny\",layer=\"1\"} 15")) << t;
  EXPECT_TRUE(Has(t, "expertd:expert_cache_hits_total{model_name=\"tiny\",layer=\"3\"} 7"));
  EXPECT_TRUE(Has(t, "expertd:expert_cache_misses_total{model_name=\"tiny\",layer=\"3\"} 1"));
  EXPECT_TRUE(Has(t, "expertd:expert_prefetch_used_total{model_name=\"tiny\",layer=\"1\"} 2"));
  EXPECT_TRUE(Has(t, "expertd:expert_prefetch_wasted_total{model_name=\"tiny\",layer=\"1\"} 1"));
  EXPECT_TRUE(Has(t, "expertd:expert_stall_seconds_total{model_name=\"tiny\",layer=\"1\"} 0.75"));
  EXPECT_TRUE(Has(t, "expertd:expert_host_computes_total{model_name=\"tiny\",layer=\"1\"} 9"));
  EXPECT_TRUE(Has(t, "expertd:expert_host_computes_total{model_name=\"tiny\",layer=\"3\"} 0"));
  EXPECT_TRUE(Has(t,
                  "expertd:expert_bytes_moved_total{model_name=\"tiny\",path=\"host_to_device\","
                  "format=\"int4-g32-f16\"} 1524"));
  EXPECT_TRUE(Has(t,
                  "expertd:expert_bytes_moved_total{model_name=\"tiny\",path=\"disk_to_host\","
                  "format=\"int4-g32-f16\"} 500"));
  EXPECT_TRUE(Has(t, "expertd:experts_on_device{model_name=\"tiny\",layer=\"1\"} 6"));
  EXPECT_TRUE(Has(t, "expertd:expert_cache_used_bytes{model_name=\"tiny\",tier=\"device\"} 2048"));
  EXPECT_TRUE(
      Has(t, "expertd:expert_cache_capacity_bytes{model_name=\"tiny\",tier=\"device\"} 4096"));
}

// Bytes are labelled with the format they were moved in: no series before the
// first snapshot, both paths at 0 from it on, and a model stored in another
// format (after a checkpoint activation) counts in series of its own.
TEST(ServingMetricsTest, ExpertBytesMovedAreLabelledWithTheStoredFormat) {
  ServingMetrics m(Info());
  EXPECT_EQ(m.Render().find("expertd:expert_bytes_moved_total{"), std::string::npos);
  ExpertCacheSnapshot s;
  s.format = "bf16";
  s.layers.resize(1);
  m.UpdateExpertCache(s);
  std::string t = m.Render();
  EXPECT_TRUE(Has(t, "expertd:expert_bytes_moved_total{model_name=\"tiny\",path=\"disk_to_host\","
                     "format=\"bf16\"} 0"))
      << t;
  s.layers[0].bytes_disk_to_host = 8192;
  m.UpdateExpertCache(s);
  ExpertCacheSnapshot next;  // the new model restarts counting in fp8
  next.format = "fp8-block-g128x128-f32";
  next.layers.resize(1);
  next.layers[0].bytes_disk_to_host = 4096;
  m.UpdateExpertCache(next);
  t = m.Render();
  EXPECT_TRUE(Has(t, "expertd:expert_bytes_moved_total{model_name=\"tiny\",path=\"disk_to_host\","
                     "format=\"bf16\"} 8192"))
      << t;
  EXPECT_TRUE(Has(t, "expertd:expert_bytes_moved_total{model_name=\"tiny\",path=\"disk_to_host\","
                     "format=\"fp8-block-g128x128-f32\"} 4096"))
      << t;
  next.format.clear();
  m.UpdateExpertCache(next);
  EXPECT_NE(m.Render().find(",format=\"unknown\"} 0\n"), std::string::npos);
}

TEST(ServingMetricsTest, CollectHookPullsSnapshotsOnScrape) {
  ServingMetrics m(Info());
  int64_t waiting = 0;
  m.AddCollectHook([&] { m.UpdateScheduler({1, ++waiting, 0.5}); });
  EXPECT_TRUE(Has(m.Render(), "expertd:num_requests_waiting{model_name=\"tiny\"} 1"));
  EXPECT_TRUE(Has(m.Render(), "expertd:num_requests_waiting{model_name=\"tiny\"} 2"));
}

}  // namespace
}  // namespace expertd::server
