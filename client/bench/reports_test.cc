// Result JSON key names (vLLM's where the metric is the same), CSV layout and
// quoting, expert-cache diffs and the gnuplot script.
#include <cmath>

#include "absl/strings/str_split.h"
#include "client/bench/expert_stats.h"
#include "client/bench/plot.h"
#include "client/bench/report_csv.h"
#include "client/bench/report_json.h"
#include "client/bench/report_table.h"
#include "gtest/gtest.h"

namespace expertd::bench {
namespace {

RunResult OneOkOneError() {
  RunResult run;
  RequestRecord a;
  a.index = 0;
  a.start_s = 0.001;
  a.message_times_s = {0.011, 0.021, 0.041};
  a.message_tokens = {1, 1, 1};
  a.output_tokens = 3;
  a.server_output_tokens = 3;
  a.input_tokens = 7;
  a.max_new_tokens = 3;
  a.end_s = 0.051;
  a.outcome = kOutcomeOk;
  a.finish_reason = "LENGTH";
  a.prompt_hash = 0xabc;
  RequestRecord b;
  b.index = 1;
  b.scheduled_s = 0.002;
  b.start_s = 0.003;
  b.end_s = 0.004;
  b.outcome = "RESOURCE_EXHAUSTED";
  b.error_message = "queue full, \"retry\"";
  run.records = {a, b};
  run.issued = 2;
  run.measure_end_s = 0.051;
  return run;
}

TEST(ReportCsvTest, OneRowPerRequestWithQuotedErrors) {
  const std::string csv = RequestsCsv(OneOkOneError());
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(
      lines[0].rfind(
          "index,phase,outcome,finish_reason,scheduled_ms,start_ms,ttft_ms,e2e_ms,tpot_ms,", 0),
      0u);
  EXPECT_EQ(lines[1],
            "0,measure,ok,LENGTH,,1.000,10.000,50.000,20.000,7,3,3,3,3,15.000,20.000,,,"
            "0000000000000abc,");
  EXPECT_EQ(lines[2],
            "1,measure,RESOURCE_EXHAUSTED,,2.000,3.000,,1.000,,,0,,0,0,,,,,0000000000000000,"
            "\"queue full, \"\"retry\"\"\"");
}

TEST(ReportJsonTest, UsesVllmKeyNames) {
  RunConfig c;
  c.open_loop = true;
  c.request_rate = INFINITY;
  c.max_concurrency = 0;
  c.percentiles = {50, 99, 99.9};
  c.slo.ttft_ms = 100;
  const RunResult run = OneOkOneError();
  BenchSummary s = SummarizeRun(run, c.slo, c.percentiles);
  ExpertCacheReport cache;
  cache.source = "admin";
  cache.reason = "GetExpertStats: UNIMPLEMENTED: no expert store";
  auto j = ResultJson(c, s, {cache}, &run);
  for (const char* key : {"date",
                          "backend",
                          "model_id",
                          "tokenizer_id",
                          "num_prompts",
                          "request_rate",
                          "burstiness",
                          "max_concurrency",
                          "duration",
                          "completed",
                          "failed",
                          "total_input_tokens",
                          "total_output_tokens",
                          "request_throughput",
                          "request_goodput",
                          "output_throughput",
                          "total_token_throughput",
                          "max_output_tokens_per_s",
                          "max_concurrent_requests",
                          "mean_ttft_ms",
                          "median_ttft_ms",
                          "std_ttft_ms",
                          "p99_ttft_ms",
                          "p99.9_ttft_ms",
                          "p50_ttft_ms",
                          "mean_tpot_ms",
                          "median_tpot_ms",
                          "std_tpot_ms",
                          "p99_tpot_ms",
                          "mean_itl_ms",
                          "median_itl_ms",
                          "std_itl_ms",
                          "p99_itl_ms",
                          "mean_e2el_ms",
                          "median_e2el_ms",
                          "std_e2el_ms",
                          "p99_e2el_ms",
                          "input_lens",
                          "output_lens",
                          "ttfts",
                          "itls",
                          "latencies",
                          "errors"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_TRUE(j["max_concurrency"].is_null());
  EXPECT_EQ(j["completed"], 1);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["error_counts"]["RESOURCE_EXHAUSTED"], 1);
  EXPECT_EQ(j["request_goodput"], 1 / 0.051);
  EXPECT_NEAR(j["mean_ttft_ms"].get<double>(), 10, 1e-9);
  EXPECT_EQ(j["itls"][0].size(), 2u);  // seconds, like vLLM's
  EXPECT_NEAR(j["itls"][0][1].get<double>(), 0.020, 1e-12);
  EXPECT_EQ(j["expert_cache"]["admin"]["available"], false);
  EXPECT_EQ(j["expert_cache"]["admin"]["reason"], cache.reason);
  EXPECT_FALSE(ResultJson(c, s, {cache}, nullptr).contains("ttfts"));  // summary only
  EXPECT_EQ(PercentileWord(99), "99");
  EXPECT_EQ(PercentileWord(99.9), "99.9");

  const std::string table = ResultTable(c, s, {cache});
  EXPECT_NE(table.find("Serving Benchmark Result"), std::string::npos);
  EXPECT_NE(table.find("RESOURCE_EXHAUSTED:"), std::string::npos);
  EXPECT_NE(table.find("unavailable: GetExpertStats: UNIMPLEMENTED"), std::string::npos);
}

TEST(ExpertStatsTest, DiffGivesHitRateAndBytesPerToken) {
  ExpertSnapshot before, after;
  before.ok = after.ok = true;
  before.counters.hits = 10;
  before.counters.tokens = 100;
  after.counters.hits = 40;
  after.counters.misses = 10;
  after.counters.bytes_host_to_device = 5000;
  after.counters.bytes_disk_to_host = 1000;
  after.counters.tokens = 200;
  ExpertCacheReport r = DiffSnapshots("metrics", before, after);
  EXPECT_TRUE(r.available);
  EXPECT_DOUBLE_EQ(r.delta.hits, 30);
  EXPECT_DOUBLE_EQ(r.hit_rate, 0.75);
  EXPECT_DOUBLE_EQ(r.bytes_paged_per_token, 50);
  EXPECT_DOUBLE_EQ(r.disk_bytes_per_token, 10);
  // No lookups: no hit rate.
  EXPECT_EQ(DiffSnapshots("metrics", before, before).hit_rate, -1);
  ExpertSnapshot failed;
  failed.error = "GetExpertStats: UNIMPLEMENTED: x";
  ExpertCacheReport u = DiffSnapshots("admin", failed, after);
  EXPECT_FALSE(u.available);
  EXPECT_EQ(u.reason, failed.error);
}

TEST(PlotTest, ScriptDrawsBothPanelsIntoThePng) {
  std::vector<PlotPoint> points = {{"c1", 100, 5, 6, 1, 2}, {"c8", 700, 9, 300, 3, 4}};
  const std::string gp = GnuplotScript("/tmp/x-sweep", "title", points);
  EXPECT_NE(gp.find("set terminal pngcairo"), std::string::npos);
  EXPECT_NE(gp.find("set output '/tmp/x-sweep.png'"), std::string::npos);
  EXPECT_NE(gp.find("'/tmp/x-sweep.dat' using 2:3"), std::string::npos);  // TTFT p50
  EXPECT_NE(gp.find("'/tmp/x-sweep.dat' using 2:6"), std::string::npos);  // TPOT p99
  EXPECT_NE(gp.find("set logscale y"), std::string::npos);                // TTFT spans 5..300
  EXPECT_FALSE(WriteSweepPlot("/tmp/it's", "t", points).ok());
}

}  // namespace
}  // namespace expertd::bench
